#include "kintsugi/train/step_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

nlohmann::json to_json(const StepMetrics& m) {
  nlohmann::json memory = nlohmann::json::object(), peak = nlohmann::json::object();
  for (int k = 0; k < kMemoryKinds; ++k) {
    memory[std::string(name_of(static_cast<MemoryKind>(k)))] = m.memory_current[k];
    peak[std::string(name_of(static_cast<MemoryKind>(k)))] = m.memory_peak[k];
  }
  nlohmann::json j = {{"step", m.step},
                      {"loss", m.loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"step_ms", m.step_seconds * 1e3},
                      {"elapsed_s", m.elapsed_seconds},
                      {"tokens_seen", m.tokens_seen},
                      {"samples_seen", m.samples_seen},
                      {"global_batch", m.global_batch},
                      {"tokens_per_s", m.tokens_per_s},
                      {"model_tflops", m.model_tflops},
                      {"mfu", m.mfu},
                      {"hfu", m.hfu},
                      {"memory_bytes", memory},
                      {"memory_peak_bytes", peak}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.loss_scale) j["loss_scale"] = *m.loss_scale;
  if (m.skipped) j["skipped"] = true;
  if (!m.comm_bytes.empty()) j["comm_bytes_sent"] = m.comm_bytes;
  if (!m.comm_bytes_theory.empty()) j["comm_bytes_theory"] = m.comm_bytes_theory;
  if (m.bubble) j["bubble"] = *m.bubble;
  if (m.activations_in_flight > 0) j["activations_in_flight"] = m.activations_in_flight;
  if (!m.dataset_tokens.empty()) j["dataset_tokens"] = m.dataset_tokens;
  if (m.moe_aux_loss) {
    j["moe_aux_loss"] = *m.moe_aux_loss;
    j["moe_z_loss"] = *m.moe_z_loss;
    nlohmann::json load = nlohmann::json::array();
    for (const auto& [most, mean] : m.moe_load) load.push_back({{"max", most}, {"mean", mean}});
    j["moe_expert_load"] = load;
    if (m.moe_dropped_fraction) j["moe_dropped_fraction"] = *m.moe_dropped_fraction;
    if (m.moe_router_bias_max_abs) j["moe_router_bias_max_abs"] = *m.moe_router_bias_max_abs;
  }
  if (m.energy_j) {
    j["energy_j"] = *m.energy_j;
    j["energy_s"] = *m.energy_seconds;
    j["joules_per_token"] = *m.joules_per_token;
    j["power_w"] = *m.energy_j / *m.energy_seconds;
  }
  return j;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& m) {
  std::vector<std::pair<std::string, double>> s = {
      {"train/loss", m.loss},
      {"train/lr", m.lr},
      {"train/grad_norm", m.grad_norm},
      {"train/tokens_seen", static_cast<double>(m.tokens_seen)},
      {"train/global_batch", static_cast<double>(m.global_batch)},
      {"perf/step_ms", m.step_seconds * 1e3},
      {"perf/tokens_per_s", m.tokens_per_s},
      {"perf/model_tflops", m.model_tflops},
      {"perf/mfu", m.mfu},
      {"perf/hfu", m.hfu}};
  if (m.val_loss) s.emplace_back("val/loss", *m.val_loss);
  if (m.loss_scale) s.emplace_back("train/loss_scale", *m.loss_scale);
  if (m.bubble) s.emplace_back("perf/bubble", *m.bubble);
  if (m.moe_aux_loss) {
    s.emplace_back("train/moe_aux_loss", *m.moe_aux_loss);
    s.emplace_back("train/moe_z_loss", *m.moe_z_loss);
    if (m.moe_dropped_fraction) s.emplace_back("train/moe_dropped_fraction", *m.moe_dropped_fraction);
    if (m.moe_router_bias_max_abs)
      s.emplace_back("train/moe_router_bias_max_abs", *m.moe_router_bias_max_abs);
  }
  if (m.energy_j) {
    s.emplace_back("energy/step_j", *m.energy_j);
    s.emplace_back("energy/joules_per_token", *m.joules_per_token);
    s.emplace_back("energy/power_w", *m.energy_j / *m.energy_seconds);
  }
  for (int k = 0; k < kMemoryKinds; ++k) {
    const std::string kind(name_of(static_cast<MemoryKind>(k)));
    s.emplace_back("memory/" + kind + "_bytes", static_cast<double>(m.memory_current[k]));
    s.emplace_back("memory_peak/" + kind + "_bytes", static_cast<double>(m.memory_peak[k]));
  }
  for (const auto& [key, bytes] : m.comm_bytes)
    s.emplace_back("comm/" + key + "_bytes", static_cast<double>(bytes));
  return s;
}

std::string format_bytes(std::size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.0f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.0f} KiB", b / 1024.0);
}

std::string format_count(std::int64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return fmt::format("{:.2f}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}K", v / 1e3);
  return fmt::format("{}", n);
}

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s, 3600) / 60);
}

std::string format_step_line(const StepMetrics& m, std::int64_t total_steps, double eta) {
  auto mem = [&](MemoryKind k) { return format_bytes(m.memory_current[static_cast<int>(k)]); };
  std::string line = fmt::format(
      "step {:>{}}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | {:.3f} TFLOP/s | "
      "MFU {:.1f}% | {:.0f} ms | mem param {} grad {} optim {} act {} work {} | {} tokens "
      "| elapsed {} | eta {}",
      m.step, fmt::format("{}", total_steps).size(), total_steps, m.loss, m.lr, m.grad_norm,
      m.tokens_per_s, m.model_tflops, 100.0 * m.mfu, m.step_seconds * 1e3,
      mem(MemoryKind::parameters), mem(MemoryKind::gradients), mem(MemoryKind::optimizer_state),
      mem(MemoryKind::activations), mem(MemoryKind::workspace), format_count(m.tokens_seen),
      format_duration(m.elapsed_seconds), format_duration(eta));
  if (m.hfu > m.mfu * 1.0001) line += fmt::format(" | HFU {:.1f}%", 100.0 * m.hfu);
  if (m.loss_scale) line += fmt::format(" | scale {:g}", *m.loss_scale);
  if (m.skipped) line += " | skipped: gradient overflow";
  if (m.bubble) line += fmt::format(" | idle {:.0f}%", 100 * *m.bubble);
  if (m.moe_aux_loss) {
    // The most loaded layer's busiest expert against the mean (1 when balanced).
    double load = 0;
    for (const auto& [most, mean] : m.moe_load) load = std::max(load, mean > 0 ? most / mean : 0);
    line += fmt::format(" | moe aux {:.4f} z {:.3g} load {:.2f}", *m.moe_aux_loss, *m.moe_z_loss,
                        load);
    if (m.moe_dropped_fraction) line += fmt::format(" dropped {:.3f}", *m.moe_dropped_fraction);
  }
  if (m.energy_j)
    line += fmt::format(" | {:.4g} J ({:.3g} J/token, {:.0f} W)", *m.energy_j,
                        *m.joules_per_token, *m.energy_j / *m.energy_seconds);
  if (!m.comm_bytes.empty()) {
    std::uint64_t total = 0;
    for (const auto& [_, b] : m.comm_bytes) total += b;
    line += fmt::format(" | comm {}", format_bytes(total));
  }
  if (m.val_loss) line += fmt::format(" | val {:.4f}", *m.val_loss);
  return line;
}

MetricsWriter::MetricsWriter(const std::string& path, std::int64_t keep_through_step)
    : path_(path) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // Lines of steps the resumed run will repeat (written after its checkpoint) are dropped.
  std::string kept;
  if (keep_through_step >= 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", std::int64_t{0}) <= keep_through_step) kept += line + "\n";
    }
  }
  out_.open(path, std::ios::trunc);
  out_ << kept;
  if (!out_) fail("cannot write the metrics file {}: check the directory exists and is writable", path);
}

void MetricsWriter::write(const StepMetrics& m) { write_line(to_json(m).dump()); }

void MetricsWriter::write_initial_evaluation(double val_loss) {
  write_line(nlohmann::json{{"step", 0}, {"val_loss", val_loss}, {"tokens_seen", 0}}.dump());
}

void MetricsWriter::write_line(const std::string& line) {
  errno = 0;
  out_ << line << '\n';
  out_.flush();
  if (!out_)
    fail("cannot write the metrics file {} ({}): free space or choose another --metrics/--out",
         path_, errno ? std::strerror(errno) : "write error");
}

}  // namespace kintsugi
