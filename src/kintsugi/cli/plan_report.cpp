#include "kintsugi/cli/plan_report.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kintsugi::cli {

namespace {
// Seconds with a unit that keeps three significant digits readable.
std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.2f}s", s);
  if (s >= 1e-3) return fmt::format("{:.1f}ms", s * 1e3);
  return fmt::format("{:.0f}us", s * 1e6);
}
}  // namespace

void print_prediction_table(const std::vector<Prediction>& rows, std::size_t top) {
  fmt::print(
      "{:>3} {:<44} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>10} {:>6} "
      "{:>6}\n",
      "#", "layout", "mem GB", "step", "compute", "tp", "pp", "dp", "bubble", "optim", "host",
      "tokens/s", "samples/s", "MFU", "HFU");
  for (std::size_t i = 0; i < std::min(top, rows.size()); ++i) {
    const Prediction& p = rows[i];
    fmt::print(
        "{:>3} {:<44} {:>8.3g} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11.4g} "
        "{:>10.4g} {:>5.1f}% {:>5.1f}%\n",
        i + 1, describe(p.layout), p.memory.total() / 1e9, seconds(p.time.total()),
        seconds(p.time.compute), seconds(p.time.tp), seconds(p.time.pp), seconds(p.time.dp),
        seconds(p.time.bubble), seconds(p.time.optimizer), seconds(p.time.host), p.tokens_per_s,
        p.samples_per_s, 100 * p.mfu, 100 * p.hfu);
  }
  fmt::print(
      "\nlayout: tp/pp/dp ranks, mb micro-batch; pipeline schedule (gpipe, 1f1b, interleaved) "
      "with vN model chunks per\nrank; zeroN ZeRO stage; hsdpN ZeRO sharded over groups of N "
      "data-parallel ranks, replicated across groups;\nselective/full activation recomputation; "
      "sp sequence parallelism. mem GB: per device, 1e9 bytes, on the fullest\nstage. Times "
      "per optimizer step: compute, the tp/pp/dp communication not hidden behind it, the "
      "pipeline\nbubble, the optimizer, host overhead. MFU/HFU: model/hardware FLOPs (HFU counts "
      "recomputation) over the peak.\n");
}

nlohmann::json to_json(const Prediction& p) {
  const Layout& l = p.layout;
  return {
      {"layout",
       {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"micro_batch", l.micro_batch},
        {"schedule", std::string(name_of(l.schedule))}, {"virtual_stages", l.virtual_stages},
        {"zero", stage_number(l.zero)},
        {"hsdp", l.hsdp},
        {"recompute", name_of(l.recompute)},
        {"sequence_parallel", l.sequence_parallel}}},
      {"memory_bytes",
       {{"parameters", p.memory.parameters}, {"gradients", p.memory.gradients},
        {"optimizer_state", p.memory.optimizer_state}, {"activations", p.memory.activations},
        {"communication", p.memory.communication}, {"reserved", p.memory.reserved},
        {"total", p.memory.total()}}},
      {"memory_bytes_first_stage",
       {{"parameters", p.first_stage_memory.parameters},
        {"gradients", p.first_stage_memory.gradients},
        {"optimizer_state", p.first_stage_memory.optimizer_state},
        {"activations", p.first_stage_memory.activations},
        {"total", p.first_stage_memory.total()}}},
      {"fits", p.fits},
      {"step_seconds",
       {{"compute", p.time.compute}, {"tp", p.time.tp}, {"pp", p.time.pp}, {"dp", p.time.dp},
        {"bubble", p.time.bubble}, {"optimizer", p.time.optimizer}, {"host", p.time.host},
        {"total", p.time.total()}}},
      {"crosses_nodes",
       {{"tp", p.tp_crosses_nodes}, {"pp", p.pp_crosses_nodes}, {"dp", p.dp_crosses_nodes}}},
      {"gemm_efficiency", p.gemm_efficiency},
      {"tokens_per_s", p.tokens_per_s},
      {"samples_per_s", p.samples_per_s},
      {"mfu", p.mfu},
      {"hfu", p.hfu}};
}

}  // namespace kintsugi::cli
