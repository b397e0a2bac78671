#include "kintsugi/core/energy_counter.hpp"
#include "kintsugi/core/host_name.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

namespace kintsugi {

namespace fs = std::filesystem;

FileRead read_small_file(const fs::path& path) {
  errno = 0;
  std::ifstream in(path);
  if (!in) return {std::nullopt, errno ? errno : ENOENT};
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return {std::nullopt, errno ? errno : EIO};
  return {text.str(), 0};
}

std::uint64_t counter_delta(std::uint64_t before, std::uint64_t now, std::uint64_t max_range) {
  if (now >= before) return now - before;
  return (max_range - std::min(before, max_range)) + now;
}

namespace {

// A whole number written by the kernel ("123456\n"); none otherwise.
std::optional<std::uint64_t> parse_count(const std::string& text) {
  std::size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return std::nullopt;
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + end + 1, v);
  if (ec != std::errc{} || p != text.data() + end + 1) return std::nullopt;
  return v;
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

struct RaplZone {
  std::string name;  // "package-0"
  fs::path energy;   // .../energy_uj
  std::uint64_t max_range = 0, last = 0;
};

class RaplCounter final : public EnergyCounter {
 public:
  RaplCounter(std::vector<RaplZone> zones, FileReader read)
      : zones_(std::move(zones)), read_(std::move(read)) {}

  std::optional<double> joules() override {
    if (broken_) return std::nullopt;
    for (RaplZone& z : zones_) {
      const FileRead r = read_(z.energy);
      const auto now = r.text ? parse_count(*r.text) : std::nullopt;
      if (!now) {
        broken_ = true;
        return std::nullopt;
      }
      total_uj_ += counter_delta(z.last, *now, z.max_range);
      z.last = *now;
    }
    return static_cast<double>(total_uj_) * 1e-6;
  }

  std::string describe() const override {
    std::string names;
    for (const RaplZone& z : zones_) names += (names.empty() ? "" : " + ") + z.name;
    return "RAPL " + names;
  }

  std::string identity() const override { return host_name() + " rapl"; }

 private:
  std::vector<RaplZone> zones_;
  FileReader read_;
  std::uint64_t total_uj_ = 0;
  bool broken_ = false;
};

std::string read_problem(const fs::path& file, int error) {
  if (error == EACCES || error == EPERM)
    return fmt::format("{} is not readable (permission denied; energy_uj is root-only since "
                       "Linux 5.10, CVE-2020-8694): run as root or grant read access to it",
                       file.string());
  if (error == ENOENT) return fmt::format("{} does not exist", file.string());
  return fmt::format("{} cannot be read ({})", file.string(), std::strerror(error));
}

}  // namespace

OpenedCounter open_rapl(const fs::path& root, const FileReader& read) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return {nullptr, fmt::format("no RAPL energy counters: {} does not exist on this machine "
                                 "(no powercap driver, or a VM or container that hides it)",
                                 root.string())};
  // Package zones only: intel-rapl:0, amd-rapl:1 (not intel-rapl:0:1, a subzone, nor
  // intel-rapl-mmio:0, the same package seen through MMIO).
  static const std::regex package(R"((intel|amd)-rapl:[0-9]+)");
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (std::regex_match(entry.path().filename().string(), package)) dirs.push_back(entry.path());
  if (ec)
    return {nullptr, fmt::format("no RAPL energy counters: {} cannot be listed ({})",
                                 root.string(), ec.message())};
  if (dirs.empty())
    return {nullptr, fmt::format("no RAPL energy counters: {} has no package zone "
                                 "(intel-rapl:N or amd-rapl:N)",
                                 root.string())};
  std::sort(dirs.begin(), dirs.end());
  std::vector<RaplZone> zones;
  for (const fs::path& dir : dirs) {
    RaplZone z;
    const FileRead name = read(dir / "name");
    z.name = name.text ? trimmed(*name.text) : dir.filename().string();
    z.energy = dir / "energy_uj";
    const FileRead energy = read(z.energy);
    if (!energy.text) return {nullptr, "RAPL: " + read_problem(z.energy, energy.error)};
    const auto now = parse_count(*energy.text);
    if (!now)
      return {nullptr, fmt::format("RAPL: {} holds \"{}\", not a count of microjoules",
                                   z.energy.string(), trimmed(*energy.text))};
    const fs::path range_file = dir / "max_energy_range_uj";
    const FileRead range = read(range_file);
    const auto max_range = range.text ? parse_count(*range.text) : std::nullopt;
    if (!max_range || *max_range == 0)
      return {nullptr, fmt::format("RAPL: {} (the counter's wrap-around point) {}: its energy "
                                   "cannot be followed across a wrap",
                                   range_file.string(),
                                   range.text ? "is not a positive count"
                                              : read_problem(range_file, range.error))};
    z.max_range = *max_range;
    z.last = *now;
    zones.push_back(std::move(z));
  }
  return {std::make_unique<RaplCounter>(std::move(zones), read), ""};
}

namespace {

// NVML's C interface, the few calls used (nvml.h of the CUDA toolkit; the _v2 names are the
// ones the header maps the plain names to).
using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  std::string problem;  // why NVML is not usable
};

// Loaded and initialized once per process and never unloaded (NVML counts its own inits).
const Nvml& nvml(const std::string& library) {
  static const Nvml loaded = [&] {
    Nvml n;
    void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = dlerror();
      n.problem = fmt::format("NVML is not available: {} cannot be loaded ({})", library,
                              e ? e : "unknown error");
      return n;
    }
    auto symbol = [&](auto& fn, const char* symbol_name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol_name));
      if (!fn && n.problem.empty())
        n.problem = fmt::format("NVML is not usable: {} has no {}", library, symbol_name);
    };
    symbol(n.init, "nvmlInit_v2");
    symbol(n.error_string, "nvmlErrorString");
    symbol(n.by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    symbol(n.energy, "nvmlDeviceGetTotalEnergyConsumption");
    symbol(n.name, "nvmlDeviceGetName");
    if (!n.problem.empty()) return n;
    if (const nvmlReturn_t r = n.init(); r != kNvmlSuccess)
      n.problem = fmt::format("NVML is not usable: nvmlInit failed ({})", n.error_string(r));
    return n;
  }();
  return loaded;
}

class NvmlCounter final : public EnergyCounter {
 public:
  NvmlCounter(const Nvml& api, nvmlDevice_t device, std::string pci, std::string name,
              unsigned long long first_mj)
      : api_(api), device_(device), pci_(std::move(pci)), name_(std::move(name)),
        first_mj_(first_mj) {}

  std::optional<double> joules() override {
    unsigned long long mj = 0;
    if (broken_ || api_.energy(device_, &mj) != kNvmlSuccess) {
      broken_ = true;
      return std::nullopt;
    }
    return static_cast<double>(mj - first_mj_) * 1e-3;  // a 64-bit count: it does not wrap
  }
  std::string describe() const override { return fmt::format("NVML {} {}", name_, pci_); }
  std::string identity() const override { return host_name() + " nvml " + pci_; }

 private:
  const Nvml& api_;
  nvmlDevice_t device_;
  std::string pci_, name_;
  unsigned long long first_mj_;
  bool broken_ = false;
};

}  // namespace

OpenedCounter open_nvml(const std::string& pci_bus_id, const std::string& library) {
  const Nvml& api = nvml(library);
  if (!api.problem.empty()) return {nullptr, api.problem};
  nvmlDevice_t device = nullptr;
  if (const nvmlReturn_t r = api.by_pci(pci_bus_id.c_str(), &device); r != kNvmlSuccess)
    return {nullptr, fmt::format("NVML does not find the GPU at PCI {} ({})", pci_bus_id,
                                 api.error_string(r))};
  char name[96] = {};
  if (api.name(device, name, sizeof name) != kNvmlSuccess) std::strcpy(name, "GPU");
  unsigned long long first = 0;
  if (const nvmlReturn_t r = api.energy(device, &first); r != kNvmlSuccess)
    return {nullptr, fmt::format("NVML has no energy counter for {} at PCI {} ({}; Volta and "
                                 "newer have one)",
                                 name, pci_bus_id, api.error_string(r))};
  return {std::make_unique<NvmlCounter>(api, device, pci_bus_id, name, first), ""};
}

}  // namespace kintsugi
