#include "kintsugi/plan/gemm_rate.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "kintsugi/core/cache_dir.hpp"
#include "kintsugi/core/cpu_info.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/plan/device_timing.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

int rate_threads(const Backend& backend) {
  return backend.device() == Device::cpu ? compute_threads() : 0;
}

GemmRate measure_gemm_rate(Backend& backend, int size, int repeats, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    fail("GEMM rates are measured for f32, bf16 and f16, not {}", name_of(dtype));
  const std::int64_t n = size;
  std::vector<float> a(static_cast<std::size_t>(n * n)), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i % 17) * 0.01);
    b[i] = static_cast<float>((i % 13) * 0.02);
  }
  // A linear layer's forward: y[n, n] = x . w^T with f32 results (f32 accumulation either way).
  const std::size_t operand = static_cast<std::size_t>(n * n) * size_of(dtype);
  const Buffer xs = backend.allocate(MemoryKind::workspace, operand);
  const Buffer ws = backend.allocate(MemoryKind::workspace, operand);
  const Buffer ys = backend.allocate(MemoryKind::workspace, static_cast<std::size_t>(n * n) * 4);
  const Tensor x = xs.view(dtype, {n, n}), w = ws.view(dtype, {n, n}), y = ys.view(DType::f32, {n, n});
  write_values(a.data(), x);
  write_values(b.data(), w);
  const double best = best_seconds_per_call(
      backend, [&] { backend.linear_forward(x, w, nullptr, y); }, repeats);
  GemmRate rate;
  rate.gflops = 2.0 * size * double(size) * size / best / 1e9;
  rate.threads = rate_threads(backend);
  rate.size = size;
  rate.cpu = backend.hardware();
  rate.dtype = dtype;
  rate.source = fmt::format("{} GEMM rate measured on this machine ({}, {}^3, best of {}, {})",
                            std::string(name_of(dtype)), rate.cpu, size, repeats,
                            rate.threads > 0 ? fmt::format("{} threads", rate.threads)
                                             : std::string(name_of(backend.device())));
  return rate;
}

DType peak_dtype(Precision precision) {
  return precision == Precision::bf16 ? DType::bf16 : DType::f32;
}

namespace {
fs::path rates_file() { return cache_file("gemm-rate.json"); }
}  // namespace

// Entries written before rates had a dtype are f32.
std::string entry_dtype(const nlohmann::json& e) { return e.value("dtype", std::string("f32")); }

std::optional<GemmRate> cached_gemm_rate(int threads, DType dtype, const std::string& hardware) {
  std::ifstream in(rates_file());
  if (!in) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(in);
    const std::string cpu = hardware.empty() ? cpu_model_name() : hardware;
    for (const auto& e : j.at("rates")) {
      if (e.at("threads").get<int>() == threads && e.at("cpu").get<std::string>() == cpu &&
          entry_dtype(e) == std::string(name_of(dtype))) {
        GemmRate r{e.at("gflops").get<double>(), threads, e.at("size").get<int>(), cpu, dtype, ""};
        r.source = fmt::format("{} GEMM rate measured by `kintsugi bench gemm` ({}, {})",
                               std::string(name_of(dtype)),
                               threads > 0 ? fmt::format("{} thread{}", threads,
                                                         threads == 1 ? "" : "s")
                                           : cpu,
                               rates_file().string());
        return r;
      }
    }
  } catch (const std::exception&) {
    // A damaged cache is only a cache: measure again.
  }
  return std::nullopt;
}

void store_gemm_rate(const GemmRate& rate) {
  nlohmann::json j = {{"rates", nlohmann::json::array()}};
  {
    std::ifstream in(rates_file());
    if (in) try {
        j = nlohmann::json::parse(in);
      } catch (const std::exception&) {
      }
  }
  // Keep the best rate ever measured: a measurement on a busy machine only under-reports the
  // peak, and MFU must not flatter a run by dividing by a depressed rate.
  auto& rates = j["rates"];
  GemmRate best = rate;
  for (auto it = rates.begin(); it != rates.end();)
    if ((*it).value("threads", 0) == rate.threads && (*it).value("cpu", "") == rate.cpu &&
        entry_dtype(*it) == std::string(name_of(rate.dtype))) {
      if ((*it).value("gflops", 0.0) > best.gflops) {
        best.gflops = (*it).value("gflops", 0.0);
        best.size = (*it).value("size", 0);
      }
      it = rates.erase(it);
    } else {
      ++it;
    }
  rates.push_back({{"gflops", best.gflops}, {"threads", best.threads}, {"size", best.size},
                   {"cpu", best.cpu}, {"dtype", std::string(name_of(best.dtype))}});
  std::error_code ec;
  fs::create_directories(rates_file().parent_path(), ec);
  const fs::path tmp = rates_file().string() + ".tmp";
  std::ofstream(tmp) << j.dump(2) << "\n";
  fs::rename(tmp, rates_file(), ec);  // best effort: a read-only home only costs re-measuring
}

GemmRate local_gemm_rate(Backend& backend, DType dtype, int size) {
  if (auto cached = cached_gemm_rate(rate_threads(backend), dtype, backend.hardware()))
    return *cached;
  GemmRate rate = measure_gemm_rate(backend, size, 5, dtype);
  store_gemm_rate(rate);
  return rate;
}

}  // namespace kintsugi
