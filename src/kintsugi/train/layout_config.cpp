#include "kintsugi/train/layout_config.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kintsugi {

Workload workload_of(const RunConfig& c) {
  return {.model = c.model,
          .global_batch = c.train.global_batch,
          .precision = c.train.precision,
          .grad_precision = c.train.grad_precision,
          .bucket_mib = c.parallel.bucket_mib};
}

Layout layout_of(const RunConfig& c) {
  const ParallelConfig& p = c.parallel;
  return {.tp = p.tp, .pp = p.pp, .dp = p.dp, .micro_batch = c.train.micro_batch,
          .schedule = parse_schedule(p.schedule), .virtual_stages = p.virtual_stages,
          .zero = p.zero, .hsdp = p.hsdp, .recompute = parse_recompute(c.train.recompute),
          .sequence_parallel = p.sequence_parallel};
}

namespace {
std::string quoted(const std::string& s) { return fmt::format("\"{}\"", s); }
std::string recompute_name(Recompute r) {
  return r == Recompute::full ? "full" : r == Recompute::selective ? "selective" : "none";
}
}  // namespace

std::string layout_config_toml(const RunConfig& base, const Layout& l) {
  const ModelConfig& m = base.model;
  const TrainConfig& t = base.train;
  const auto presets = model_preset_names();
  std::string out = fmt::format("# Written by `kintsugi plan --write-config`: {}\n", describe(l));
  out += fmt::format("# Launch with {} ranks: mpirun -np {} kintsugi train --config <this file>\n\n",
                     l.world(), l.world());
  out += "[model]\n";
  if (std::find(presets.begin(), presets.end(), m.name) != presets.end())
    out += fmt::format("preset = {}\n", quoted(m.name));
  out += fmt::format(
      "family = {}\nn_layer = {}\nd_model = {}\nn_head = {}\nn_kv_head = {}\nd_ff = {}\n"
      "vocab_size = {}\nseq_len = {}\n\n",
      quoted(m.family), m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.d_ff, m.vocab_size,
      m.seq_len);
  out += fmt::format("[data]\ntrain = {}\nval = {}\ntokenizer = {}\n\n", quoted(base.data.train),
                     quoted(base.data.val), quoted(base.data.tokenizer));
  out += fmt::format(
      "[train]\nsteps = {}\nglobal_batch = {}\nmicro_batch = {}\nlr = {}\nmin_lr = {}\n"
      "warmup_steps = {}\nseed = {}\neval_every = {}\neval_batches = {}\nlog_every = {}\n"
      "precision = {}\ngrad_precision = {}\nrecompute = {}\n\n",
      t.steps, t.global_batch, l.micro_batch, t.lr, t.min_lr, std::min(t.warmup_steps, t.steps),
      t.seed, t.eval_every, t.eval_batches, t.log_every, quoted(t.precision),
      quoted(t.grad_precision), quoted(recompute_name(l.recompute)));
  out += fmt::format(
      "[parallel]\ntp = {}\npp = {}\ndp = {}\nschedule = {}\nvirtual_stages = {}\n"
      "sequence_parallel = {}\nzero = {}\nhsdp = {}\nbucket_mib = {}\n",
      l.tp, l.pp, l.dp, quoted(std::string(name_of(l.schedule))), l.virtual_stages,
      l.sequence_parallel, l.zero, l.hsdp, base.parallel.bucket_mib);
  return out;
}

}  // namespace kintsugi
