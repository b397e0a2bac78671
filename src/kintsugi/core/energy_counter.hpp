#pragma once
// Measured energy (docs/energy.md): cumulative energy counters the hardware keeps, read before
// and after a step.
//
//  - A GPU: NVML's nvmlDeviceGetTotalEnergyConsumption (millijoules since the driver loaded;
//    Volta and newer). libnvidia-ml is opened with dlopen when asked for, so the program runs
//    where the library is absent (a CPU machine, a container without the driver's libraries).
//  - The CPU: the Linux powercap interface's RAPL zones, /sys/class/powercap/intel-rapl:N
//    (Intel, and AMD Zen, whose driver registers under the same name; amd-rapl:N where a kernel
//    names it so): energy_uj counts microjoules per package and wraps to 0 after
//    max_energy_range_uj. Only package zones are summed: their subzones (core, uncore, dram
//    inside a package) and the intel-rapl-mmio duplicate of the package would count joules twice.
//    Since Linux 5.10 energy_uj is readable by root only (CVE-2020-8694): without the right a
//    zone is reported as such, never read as zero.
//
// A counter that cannot be opened says why in one line, and nothing is reported in its place.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kintsugi {

class EnergyCounter {
 public:
  virtual ~EnergyCounter() = default;
  // Joules since the counter was opened (monotone, wrap-arounds accounted for); none when a
  // read failed (the counter is then unusable for the rest of the run).
  virtual std::optional<double> joules() = 0;
  // What is measured, for the log: "RAPL package-0 + package-1" or "NVML GPU 00000000:19:00.0".
  virtual std::string describe() const = 0;
  // Identifies the hardware counted, so that ranks sharing it count it once: the same string
  // for two processes that read the same counters on one machine.
  virtual std::string identity() const = 0;
};

struct OpenedCounter {
  std::unique_ptr<EnergyCounter> counter;  // null when none could be opened
  std::string why_not;                     // then: one line saying why
};

// Reading a sysfs file: its text, or the errno of the failure (ENOENT, EACCES, ...).
struct FileRead {
  std::optional<std::string> text;
  int error = 0;
};
using FileReader = std::function<FileRead(const std::filesystem::path&)>;
FileRead read_small_file(const std::filesystem::path& path);

// The RAPL package zones under `powercap_root` (tests pass a fake directory and reader).
OpenedCounter open_rapl(const std::filesystem::path& powercap_root = "/sys/class/powercap",
                        const FileReader& read = read_small_file);

// The energy added between readings `before` and `now` of a counter that wraps to 0 after
// reaching `max_range` (both in the counter's unit): now - before, or, when the counter went
// back, what it ran up to max_range plus what it counted from 0. One wrap at most between two
// readings: at 200 W a 262 kJ package range wraps every ~22 minutes (docs/energy.md).
std::uint64_t counter_delta(std::uint64_t before, std::uint64_t now, std::uint64_t max_range);

// The GPU whose PCI bus id is `pci_bus_id` ("0000:19:00.0", as cudaDeviceGetPCIBusId gives it),
// through NVML loaded with dlopen (`library`: the name dlopen searches; the first call loads
// NVML for the whole process, and later calls use it whatever library they name).
OpenedCounter open_nvml(const std::string& pci_bus_id,
                        const std::string& library = "libnvidia-ml.so.1");

}  // namespace kintsugi
