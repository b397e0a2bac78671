// A run config's checks: every value in its range and the values consistent with each other
// (validate), and the layout against the job and the model (resolve_layout). The messages name
// the key to change.
#include <fmt/format.h>

#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/batch_rampup.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

void validate(const RunConfig& c) {
  validate(c.model);
  const TrainConfig& t = c.train;
  auto positive = [](const char* key, auto v) {
    if (!(v > 0)) fail("train.{} = {} must be positive", key, v);
  };
  if (t.steps <= 0)
    fail("train.steps = {} must be positive (to measure a model's loss without training it, use "
         "`kintsugi eval`; to save a Hugging Face model folder as a kintsugi model without "
         "training it, `kintsugi import`)",
         t.steps);
  positive("global_batch", t.global_batch);
  positive("micro_batch", t.micro_batch);
  positive("lr", t.lr);
  positive("log_every", t.log_every);
  // Sequences and tokens trained are counted in 64 bits (tokens_seen, a ramp-up's count).
  if (std::int64_t tokens = 0; __builtin_mul_overflow(t.steps, t.global_batch, &tokens) ||
                               __builtin_mul_overflow(tokens, c.model.seq_len, &tokens))
    fail("train.steps = {} x train.global_batch = {} x model.seq_len = {} tokens is more than a "
         "run can count (2^63): lower train.steps",
         t.steps, t.global_batch, c.model.seq_len);
  if (t.global_batch % t.micro_batch != 0)
    fail("train.global_batch = {} is not a multiple of train.micro_batch = {}: change one of them",
         t.global_batch, t.micro_batch);
  batch_rampup_of(t);  // its own checks
  if (batch_lr_rule_of(t.batch_lr_rule) != BatchLrRule::none && t.batch_rampup.empty())
    fail("train.batch_lr_rule = \"{}\" scales the learning rate with a ramped batch: it needs "
         "train.batch_rampup",
         t.batch_lr_rule);
  if (t.min_lr < 0 || t.min_lr > t.lr)
    fail("train.min_lr = {} must lie in [0, train.lr = {}]", t.min_lr, t.lr);
  if (t.warmup_steps < 0) fail("train.warmup_steps = {} must not be negative", t.warmup_steps);
  if (t.decay_steps < 0)
    fail("train.decay_steps = {} must not be negative (0: train.steps)", t.decay_steps);
  if (t.decay_steps > 0 && t.decay_steps < t.warmup_steps)
    fail("train.decay_steps = {} must be at least train.warmup_steps = {}", t.decay_steps,
         t.warmup_steps);
  if (t.weight_decay < 0) fail("train.weight_decay = {} must not be negative", t.weight_decay);
  if (!(t.beta1 >= 0 && t.beta1 < 1) || !(t.beta2 >= 0 && t.beta2 < 1))
    fail("train.beta1 = {} and train.beta2 = {} must lie in [0, 1)", t.beta1, t.beta2);
  positive("eps", t.eps);
  if (t.grad_clip < 0) fail("train.grad_clip = {} must not be negative (0 turns it off)", t.grad_clip);
  if (!(t.max_memory_gb >= 0))
    fail("train.max_memory_gb = {} must not be negative (0: no limit)", t.max_memory_gb);
  if (t.eval_every < 0) fail("train.eval_every = {} must not be negative", t.eval_every);
  if (t.save_every < 0) fail("train.save_every = {} must not be negative (0: no checkpoints)", t.save_every);
  if (t.keep_checkpoints < 0)
    fail("train.keep_checkpoints = {} must not be negative (0: keep all)", t.keep_checkpoints);
  positive("eval_sequences", t.eval_sequences);
  if (t.eval_batches < 0)
    fail("train.eval_batches = {} must not be negative (it is deprecated: set "
         "train.eval_sequences)",
         t.eval_batches);
  if (!(t.lr_decay_fraction > 0 && t.lr_decay_fraction <= 1))
    fail("train.lr_decay_fraction = {} must lie in (0, 1]: the share of train.decay_steps the "
         "wsd schedule spends decaying",
         t.lr_decay_fraction);
  if (t.threads < 0) fail("train.threads = {} must not be negative (0: all cores)", t.threads);
  if (t.seed < 0) fail("train.seed = {} must not be negative", t.seed);
  positive("loss_scale", t.loss_scale);
  positive("loss_scale_window", t.loss_scale_window);
  // Unlike data.val and metrics.tensorboard_dir, data.tokenizer has no "none": an empty one
  // would train unchecked and save a model no `generate` can read.
  if (c.data.tokenizer.empty())
    fail("data.tokenizer is empty: name the data's tokenizer (a tokenizer.json, its directory or "
         "GPT-2's directory), which the run checks the data against and saves with the model");
  if (c.data.eod_id < -1 || c.data.eod_id >= c.model.vocab_size)
    fail("data.eod_id = {} must be -1 (data.tokenizer's end id) or an id below model.vocab_size "
         "= {}",
         c.data.eod_id, c.model.vocab_size);
  if (const std::string problem = c.parallel.value_problem(); !problem.empty()) fail("{}", problem);
  if (!(c.comm.bucket_mib > 0))
    fail("parallel.bucket_mib = {} must be positive", c.comm.bucket_mib);
  if (c.metrics.peak_gflops < 0)
    fail("metrics.peak_gflops = {} must not be negative (0: measure)", c.metrics.peak_gflops);
  if (!(c.comm.timeout_s > 0) || !std::isfinite(c.comm.timeout_s))
    fail("comm.timeout_s = {} must be a positive number of seconds", c.comm.timeout_s);
  if (!(c.comm.deadlock_check_s >= 0) || !std::isfinite(c.comm.deadlock_check_s))
    fail("comm.deadlock_check_s = {} must be a number of seconds, 0 or more",
         c.comm.deadlock_check_s);
  if (t.moe_aux_loss_coeff < 0 || t.moe_z_loss_coeff < 0)
    fail("train.moe_aux_loss_coeff = {} and train.moe_z_loss_coeff = {} must not be negative",
         t.moe_aux_loss_coeff, t.moe_z_loss_coeff);
  if (c.comm.backend == CommBackend::nccl && c.train.device != Device::cuda)
    fail("comm.backend = \"nccl\" moves GPU memory: it needs train.device = \"cuda\"");
}

LayoutSpec layout_spec(const RunConfig& c) {
  return {.parallel = c.parallel, .global_batch = c.train.global_batch,
          .micro_batch = c.train.micro_batch};
}

void resolve_layout(RunConfig& c, int world) {
  c.parallel = c.parallel.resolved(world);
  if (const std::string problem = layout_problem(c.model, layout_spec(c)); !problem.empty())
    fail("{}", problem);
  // The ring merges its blocks into a running state in the compute type: fp32 only so far
  // (backend/cpu/attention_block.cpp).
  if (c.parallel.cp > 1 && c.parallel.cp_comm == CpComm::ring &&
      c.train.precision != Precision::fp32)
    fail("--cp-comm ring is built for train.precision = \"fp32\" only (not \"{}\"): use "
         "--cp-comm all_to_all",
         name_of(c.train.precision));
  // Every batch of a ramp-up is split over the same layout (train/batch_rampup.hpp).
  for (std::int64_t batch :
       ramp_batches_to_check(batch_rampup_of(c.train), c.train.global_batch)) {
    LayoutSpec spec = layout_spec(c);
    spec.global_batch = batch;
    if (const std::string problem = layout_problem(c.model, spec); !problem.empty())
      fail("train.batch_rampup passes through a global batch of {}: {}", batch, problem);
  }
}

}  // namespace kintsugi
