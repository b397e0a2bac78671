// Energy counters (core/energy_counter.hpp): the RAPL reader on a fake powercap directory
// (package zones only, wrap-around, missing files, permission denied, a read failing mid-run),
// NVML absent, and the power refit `tune` makes from measured energy (plan/refit.hpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "kintsugi/core/energy_counter.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/refit.hpp"
#include "unit/scratch_dir.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

// A zone as the kernel lays it out: name, energy_uj, max_energy_range_uj.
void zone(const fs::path& root, const std::string& dir, const std::string& name,
          std::uint64_t energy, std::uint64_t max_range) {
  write(root / dir / "name", name + "\n");
  write(root / dir / "energy_uj", std::to_string(energy) + "\n");
  write(root / dir / "max_energy_range_uj", std::to_string(max_range) + "\n");
}

TEST(EnergyCounter, CounterDeltaHandlesOneWrap) {
  EXPECT_EQ(counter_delta(100, 350, 1000), 250u);
  EXPECT_EQ(counter_delta(900, 100, 1000), 200u);  // 900 -> 1000, then 0 -> 100
  EXPECT_EQ(counter_delta(1000, 0, 1000), 0u);
  EXPECT_EQ(counter_delta(5, 5, 1000), 0u);
}

TEST(EnergyCounter, RaplSumsPackagesOnlyAcrossAWrap) {
  ScratchDir root("rapl-packages");
  const std::uint64_t range = 262143328850;  // a typical package range (uJ)
  zone(root, "intel-rapl:0", "package-0", range - 1'000'000, range);
  zone(root, "intel-rapl:1", "package-1", 5'000'000, range);
  zone(root, "intel-rapl:0:0", "core", 1'000, range);      // inside package 0: not summed
  zone(root, "intel-rapl-mmio:0", "package-0", 7, range);  // package 0 again: not summed
  OpenedCounter opened = open_rapl(root.path());
  ASSERT_TRUE(opened.counter) << opened.why_not;
  EXPECT_EQ(opened.counter->describe(), "RAPL package-0 + package-1");
  EXPECT_EQ(*opened.counter->joules(), 0.0);
  // Package 0 wraps: 1 J to its end and 2 J after 0; package 1 adds 3 J; the others move a lot.
  write(root / "intel-rapl:0" / "energy_uj", "2000000\n");
  write(root / "intel-rapl:1" / "energy_uj", "8000000\n");
  write(root / "intel-rapl:0:0" / "energy_uj", "900000000\n");
  write(root / "intel-rapl-mmio:0" / "energy_uj", "900000000\n");
  EXPECT_DOUBLE_EQ(*opened.counter->joules(), 6.0);
  write(root / "intel-rapl:1" / "energy_uj", "8500000\n");
  EXPECT_DOUBLE_EQ(*opened.counter->joules(), 6.5);  // cumulative since opened
}

TEST(EnergyCounter, AmdZonesCount) {
  ScratchDir root("rapl-amd");
  zone(root, "amd-rapl:0", "package-0", 10, 1'000'000);
  OpenedCounter opened = open_rapl(root.path());
  ASSERT_TRUE(opened.counter) << opened.why_not;
  write(root / "amd-rapl:0" / "energy_uj", "500010\n");
  EXPECT_DOUBLE_EQ(*opened.counter->joules(), 0.5);
}

TEST(EnergyCounter, RaplMissingPiecesAreSaidNotFaked) {
  ScratchDir root("rapl-missing");
  auto why = [&] { return open_rapl(root.path()).why_not; };
  EXPECT_NE(open_rapl(root / "absent").why_not.find("does not exist on this machine"),
            std::string::npos);
  EXPECT_NE(why().find("has no package zone"), std::string::npos);
  zone(root, "intel-rapl:0", "package-0", 10, 1000);
  fs::remove(root / "intel-rapl:0" / "max_energy_range_uj");
  EXPECT_NE(why().find("max_energy_range_uj (the counter's wrap-around point)"),
            std::string::npos);
  EXPECT_FALSE(open_rapl(root.path()).counter);
  zone(root, "intel-rapl:0", "package-0", 10, 1000);
  fs::remove(root / "intel-rapl:0" / "energy_uj");
  EXPECT_NE(why().find("energy_uj does not exist"), std::string::npos);
  write(root / "intel-rapl:0" / "energy_uj", "n/a\n");
  EXPECT_NE(why().find("not a count of microjoules"), std::string::npos);
}

TEST(EnergyCounter, RaplPermissionDenied) {
  ScratchDir root("rapl-denied");
  zone(root, "intel-rapl:0", "package-0", 10, 1000);
  // What a non-root process meets on Linux 5.10 and later: energy_uj is mode 0400 root.
  const FileReader denied = [](const fs::path& p) -> FileRead {
    if (p.filename() == "energy_uj") return {std::nullopt, EACCES};
    return read_small_file(p);
  };
  const OpenedCounter opened = open_rapl(root.path(), denied);
  EXPECT_FALSE(opened.counter);
  EXPECT_NE(opened.why_not.find("permission denied"), std::string::npos) << opened.why_not;
  // The real file system says the same where the test does not run as root (root reads any
  // mode).
  if (geteuid() != 0) {
    fs::permissions(root / "intel-rapl:0" / "energy_uj", fs::perms::none);
    EXPECT_NE(open_rapl(root.path()).why_not.find("permission denied"), std::string::npos);
  }
}

TEST(EnergyCounter, AReadFailingMidRunEndsTheCounter) {
  ScratchDir root("rapl-vanishes");
  zone(root, "intel-rapl:0", "package-0", 10, 1000);
  OpenedCounter opened = open_rapl(root.path());
  ASSERT_TRUE(opened.counter);
  fs::remove(root / "intel-rapl:0" / "energy_uj");
  EXPECT_FALSE(opened.counter->joules());
  write(root / "intel-rapl:0" / "energy_uj", "20\n");
  EXPECT_FALSE(opened.counter->joules());  // no silent resumption from a wrong base
}

TEST(EnergyCounter, NvmlAbsentIsSaid) {
  const OpenedCounter opened = open_nvml("0000:19:00.0", "libkintsugi-no-such-nvml.so.1");
  EXPECT_FALSE(opened.counter);
  EXPECT_NE(opened.why_not.find("cannot be loaded"), std::string::npos) << opened.why_not;
}

TEST(EnergyCounter, PowerRefit) {
  ClusterSpec c;
  c.active_watts = 700;
  c.idle_watts = 90;
  const ClusterSpec r = refit_power(c, {400, 500});
  EXPECT_EQ(r.active_watts, 450);
  EXPECT_EQ(r.idle_watts, 90);
  EXPECT_EQ(refit_power(c, {60}).idle_watts, 0);  // idle above the measured draw: dropped
  EXPECT_THROW(refit_power(c, {}), Error);
  EXPECT_THROW(refit_power(c, {std::nan("")}), Error);
}

}  // namespace
}  // namespace kintsugi
