#include "kintsugi/train/run_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>
#include <toml++/toml.h>
#include <variant>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/batch_rampup.hpp"

namespace kintsugi {

namespace {

// A key's field. Enumerations are TOML strings holding one of their names (parse_choice).
using Target = std::variant<std::int64_t*, double*, std::string*, bool*, std::vector<std::int64_t>*,
                            Device*, Precision*, GradPrecision*, Recompute*, PipelineSchedule*,
                            Family*, ZeroStage*, CommBackend*, LrShape*, OptimizerKind*>;

struct Key {
  std::string path;
  Target target;
  std::string doc;
};

// The one list of keys. "model.preset" is handled before these: it sets every model field,
// which the model.* keys below then override.
std::vector<Key> keys_of(RunConfig& c) {
  return {
      {"model.family", &c.model.family,
       "architecture family: \"gpt2\", \"llama\" (RoPE, RMSNorm, SwiGLU, GQA) or \"bloom\" "
       "(ALiBi, embedding LayerNorm)"},
      {"model.n_layer", &c.model.n_layer, "transformer blocks"},
      {"model.d_model", &c.model.d_model, "hidden size"},
      {"model.n_head", &c.model.n_head, "attention heads (must divide d_model)"},
      {"model.n_kv_head", &c.model.n_kv_head,
       "key/value heads for grouped-query attention (must divide n_head; 0: n_head)"},
      {"model.d_ff", &c.model.d_ff, "MLP width (4 * d_model for GPT-2)"},
      {"model.vocab_size", &c.model.vocab_size, "vocabulary size (50257 for GPT-2's BPE)"},
      {"model.seq_len", &c.model.seq_len, "context length; training sequences have this length"},
      {"model.vocab_pad_multiple", &c.model.vocab_pad_multiple,
       "embedding rows are padded to a multiple of this (padded logits never reach the loss)"},
      {"model.norm_eps", &c.model.norm_eps, "LayerNorm / RMSNorm epsilon"},
      {"model.rope_theta", &c.model.rope_theta, "llama: base of the rotary embedding frequencies"},
      {"model.init_std", &c.model.init_std,
       "standard deviation of weight init (residual projections: / sqrt(2 * n_layer))"},
      {"data.train", &c.data.train,
       "training data: a token file or Megatron dataset (`kintsugi data tokenize`), or a blend "
       "[{ path = \"a.bin\", weight = 0.7, val = \"a_val.bin\" }, ...] drawing each sequence "
       "from dataset k with probability weight_k"},
      {"data.val", &c.data.val,
       "validation data (\"\": none, evaluation skipped); a blend's val entries replace it"},
      {"data.tokenizer", &c.data.tokenizer,
       "the data's tokenizer: tokenizer.json (or its directory) or GPT-2's directory; saved with "
       "the model"},
      {"data.document_attention", &c.data.document_attention,
       "attention does not cross an end-of-document id inside a training window and positions "
       "restart after it (Megatron-LM's reset-attention-mask and reset-position-ids)"},
      {"data.eod_id", &c.data.eod_id,
       "the id that ends a document, for document_attention (-1: data.tokenizer's end id)"},
      {"train.steps", &c.train.steps, "optimizer steps"},
      {"train.global_batch", &c.train.global_batch, "sequences per optimizer step"},
      {"train.micro_batch", &c.train.micro_batch,
       "sequences per forward/backward; global_batch / micro_batch micro-batches are accumulated"},
      {"train.batch_rampup", &c.train.batch_rampup,
       "batch-size ramp-up [start, increment, samples] (Megatron-LM's --rampup-batch-size): the "
       "global batch starts at `start` and grows by `increment` every samples / ((global_batch "
       "- start) / increment) consumed sequences until global_batch; every batch on the way "
       "must be a multiple of micro_batch x dp (default []: none; docs/config.md)"},
      {"train.batch_lr_rule", &c.train.batch_lr_rule,
       "learning rate during the ramp-up: \"none\" (the schedule's), \"sqrt\" or \"linear\" "
       "(the schedule's times (batch / global_batch)^(1/2) or ^1; docs/config.md)"},
      {"train.lr", &c.train.lr, "peak learning rate"},
      {"train.lr_schedule", &c.train.lr_schedule,
       "learning rate after the warm-up: \"cosine\" (to min_lr at decay_steps), \"linear\" (a "
       "straight line to min_lr at decay_steps), \"constant\" (lr), \"inverse_sqrt\" (lr "
       "sqrt(warmup_steps / n) at step n, at least min_lr) or \"wsd\" (warmup-stable-decay: lr, "
       "then a straight line to min_lr over the last lr_decay_fraction of decay_steps)"},
      {"train.min_lr", &c.train.min_lr,
       "learning rate at the end of the decay (cosine, linear, wsd) and the floor of "
       "inverse_sqrt"},
      {"train.warmup_steps", &c.train.warmup_steps,
       "linear warm-up steps (with decay_steps unset, at most train.steps)"},
      {"train.decay_steps", &c.train.decay_steps,
       "the step (counted from 1) that trains at min_lr: the end of the decay (cosine, "
       "linear, wsd; 0: train.steps, the last step)"},
      {"train.lr_decay_fraction", &c.train.lr_decay_fraction,
       "wsd: the last fraction of decay_steps over which the learning rate decays, in (0, 1]"},
      {"train.optimizer", &c.train.optimizer,
       "\"adamw\" (two moments per weight) or \"lion\" (one moment, sign updates: half AdamW's "
       "optimizer state; wants an lr 3-10x lower and a weight_decay as much higher); sharded by "
       "parallel.zero alike"},
      {"train.weight_decay", &c.train.weight_decay,
       "decoupled weight decay of AdamW and Lion (not applied to biases and norm weights)"},
      {"train.beta1", &c.train.beta1,
       "AdamW's first-moment decay; Lion's interpolation weight of the update"},
      {"train.beta2", &c.train.beta2,
       "AdamW's second-moment decay; Lion's moment decay (the Lion paper uses 0.99)"},
      {"train.eps", &c.train.eps, "AdamW epsilon (Lion has none)"},
      {"train.grad_clip", &c.train.grad_clip, "clip the global gradient norm to this (0: off)"},
      {"train.seed", &c.train.seed, "seed of initialization and batch sampling"},
      {"train.eval_every", &c.train.eval_every,
       "validation loss every this many steps (0: only after the last step)"},
      {"train.eval_sequences", &c.train.eval_sequences,
       "validation windows (of model.seq_len tokens, spread evenly over data.val) per "
       "evaluation; the same set whatever the layout and micro-batch"},
      {"train.eval_batches", &c.train.eval_batches,
       "deprecated: eval_batches x micro_batch validation windows, which change with the "
       "micro-batch (0: use eval_sequences)"},
      {"train.log_every", &c.train.log_every, "print a step line every this many steps"},
      {"train.threads", &c.train.threads, "compute threads (0: all cores)"},
      {"train.device", &c.train.device,
       "where the model trains: \"cpu\" or \"cuda\" (one GPU per rank; needs a CUDA build)"},
      {"train.precision", &c.train.precision,
       "\"fp32\", or mixed precision \"bf16\" / \"fp16\": weights and activations in 16 bits, "
       "f32 master weights and optimizer state"},
      {"train.grad_precision", &c.train.grad_precision,
       "\"fp32\" (gradients accumulated in f32) or \"param\" (in the weights' type: 2 bytes)"},
      {"train.loss_scale", &c.train.loss_scale,
       "fp16: initial dynamic loss scale (halved on overflow, doubled after a clean window)"},
      {"train.loss_scale_window", &c.train.loss_scale_window,
       "fp16: clean steps before the loss scale doubles"},
      {"train.recompute", &c.train.recompute,
       "activation recomputation: \"none\", \"selective\" (the attention core) or \"full\" "
       "(everything but each block's input)"},
      {"train.save_checkpoint", &c.train.save_checkpoint,
       "save the trained model under the output directory"},
      {"train.save_every", &c.train.save_every,
       "write a training checkpoint (weights, optimizer, loss scaler, step) to "
       "<out>/checkpoints every this many steps and after the last (0: none)"},
      {"train.keep_checkpoints", &c.train.keep_checkpoints,
       "newest training checkpoints to keep (0: all)"},
      {"parallel.tp", &c.parallel.tp,
       "tensor-parallel ranks (Megatron column/row splits; adjacent ranks, inside a node)"},
      {"parallel.dp", &c.parallel.dp, "data-parallel ranks (0: world size / (tp * pp))"},
      {"parallel.pp", &c.parallel.pp, "pipeline stages"},
      {"parallel.schedule", &c.parallel.schedule,
       "pipeline schedule: \"gpipe\", \"1f1b\" (PipeDream-Flush) or \"interleaved\" (Megatron)"},
      {"parallel.virtual_stages", &c.parallel.virtual_stages,
       "model chunks per pipeline rank (interleaved schedule)"},
      {"parallel.layers_per_stage", &c.parallel.layers_per_stage,
       "blocks of each pipeline stage, e.g. [5, 4, 3] (default []: balanced by cost)"},
      {"parallel.tensor_grid", &c.parallel.tensor_grid,
       "3D tensor parallelism (AxoNN): [x, y, z] with x y z = tp, e.g. [2, 2, 1] (default []: "
       "1D Megatron tensor parallelism over tp ranks)"},
      {"parallel.tensor_grid_overlap", &c.parallel.tensor_grid_overlap,
       "3D tensor parallelism: prefetch weight all-gathers and overlap backward's all-reduces "
       "and weight-gradient reduce-scatters with computation (false: blocking; same results)"},
      {"parallel.sequence_parallel", &c.parallel.sequence_parallel,
       "split norms and residuals along the sequence across tensor-parallel ranks"},
      {"parallel.order", &c.parallel.order,
       "rank order, fastest-varying dimension first (\"tp-dp-pp\")"},
      {"parallel.bucket_mib", &c.comm.bucket_mib,
       "data-parallel gradient bucket size in MiB (reduced while backward goes on)"},
      {"parallel.zero", &c.parallel.zero,
       "ZeRO stage: 0 replicated, 1 shards optimizer state, 2 also gradients, 3 also weights"},
      {"parallel.hsdp", &c.parallel.hsdp,
       "hybrid sharding: shard over groups of this many data-parallel ranks, replicate across "
       "groups (0: shard over all)"},
      {"metrics.peak_gflops", &c.metrics.peak_gflops,
       "peak GFLOP/s for MFU (0: the GEMM rate of the run's precision measured on this machine)"},
      {"metrics.tensorboard_dir", &c.metrics.tensorboard_dir,
       "write TensorBoard event files of every step's metrics to this directory (\"\": none)"},
      {"comm.timeout_s", &c.comm.timeout_s,
       "seconds any communication may wait for other ranks; then the job ends with a message "
       "naming the group, the operation and the ranks that did not arrive"},
      {"comm.deadlock_check_s", &c.comm.deadlock_check_s,
       "seconds world rank 0 waits in communication before it checks whether every rank waits "
       "for an operation no other rank will post (a certain deadlock, which then ends the job "
       "at once), and the first gap between checks (later ones double, up to a minute); 0: "
       "never"},
      {"comm.backend", &c.comm.backend,
       "what moves GPU tensors between ranks: \"auto\" (NCCL when every rank has a GPU of its "
       "own, else MPI), \"nccl\", or \"mpi\" (staged through host memory)"},
  };
}

std::string type_name(const Target& t) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::int64_t>) return "integer";
        else if constexpr (std::is_same_v<T, double>) return "float";
        else if constexpr (std::is_same_v<T, std::string>) return "string";
        else if constexpr (std::is_same_v<T, bool>) return "boolean";
        else if constexpr (std::is_same_v<T, ZeroStage>) return "integer";
        else if constexpr (std::is_enum_v<T>) return "string";
        else return "integers";
      },
      t);
}

std::string value_text(const Target& t) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) return fmt::format("\"{}\"", *p);
        else if constexpr (std::is_same_v<T, ZeroStage>) return fmt::format("{}", stage_number(*p));
        else if constexpr (std::is_enum_v<T>) return fmt::format("\"{}\"", name_of(*p));
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>)
          return fmt::format("[{}]", fmt::join(*p, ", "));
        else return fmt::format("{}", *p);
      },
      t);
}

void assign(const Key& key, const toml::node& node, const std::string& source) {
  auto wrong = [&] {
    std::ostringstream value;
    value << toml::node_view<const toml::node>{node};
    fail("{}: `{}` must be {}, got {}", source, key.path, type_name(key.target), value.str());
  };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, double>) {
          if (auto v = node.value<double>()) {  // integers are accepted as floats
            if (!std::isfinite(*v))  // TOML allows inf and nan: no setting means either
              fail("{}: `{}` = {} must be a finite number", source, key.path, *v);
            *p = *v;
          } else {
            wrong();
          }
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          if (!node.is_integer()) wrong();
          *p = *node.value<std::int64_t>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) wrong();
          *p = *node.value<bool>();
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          const auto* array = node.as_array();
          if (!array) wrong();
          p->clear();
          for (const auto& item : *array) {
            if (!item.is_integer()) wrong();
            p->push_back(*item.value<std::int64_t>());
          }
        } else if constexpr (std::is_same_v<T, ZeroStage>) {
          if (!node.is_integer()) wrong();
          *p = zero_stage(*node.value<std::int64_t>(), key.path);
        } else if constexpr (std::is_enum_v<T>) {
          if (!node.is_string()) wrong();
          *p = parse_name<T>(*node.value<std::string>(), key.path);
        } else {
          if (!node.is_string()) wrong();
          *p = *node.value<std::string>();
        }
      },
      key.target);
}

// The key's value as a TOML node.
void insert_value(toml::table& table, const std::string& name, const Target& target) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          toml::array array;
          for (std::int64_t v : *p) array.push_back(v);
          table.insert_or_assign(name, std::move(array));
        } else if constexpr (std::is_same_v<T, ZeroStage>) {
          table.insert_or_assign(name, std::int64_t{stage_number(*p)});
        } else if constexpr (std::is_enum_v<T>) {
          table.insert_or_assign(name, std::string(name_of(*p)));
        } else {
          table.insert_or_assign(name, *p);
        }
      },
      target);
}

// A --set value that is written as a number but that TOML cannot hold: an integer beyond 64
// bits or a float beyond a double's range. Refused here with the range, since taken as a string
// it would be answered "must be integer" (or "float"), which it is.
void refuse_out_of_range_number(const std::string& text, const std::string& value) {
  static const std::regex integer("[+-]?[0-9][0-9_]*");
  static const std::regex floating("[+-]?[0-9][0-9_]*(\\.[0-9_]+)?([eE][+-]?[0-9_]+)?");
  std::string digits = value;
  std::erase(digits, '_');
  if (std::regex_match(value, integer)) {
    std::int64_t parsed = 0;
    const char* begin = digits.c_str() + (digits[0] == '+');
    if (std::from_chars(begin, digits.c_str() + digits.size(), parsed).ec ==
        std::errc::result_out_of_range)
      fail("--set {}: {} is out of range: integers run from {} to {}", text, value,
           std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
    return;
  }
  if (!std::regex_match(value, floating)) return;
  errno = 0;
  const double parsed = std::strtod(digits.c_str(), nullptr);
  if (std::isinf(parsed))
    fail("--set {}: {} is out of range: not a finite number (a float's magnitude is at most {:g})",
         text, value, std::numeric_limits<double>::max());
  if (errno == ERANGE && parsed == 0)
    fail("--set {}: {} is out of range: too small for a float (the smallest magnitude is {:g}); "
         "write 0 for zero",
         text, value, std::numeric_limits<double>::denorm_min());
}

// "train.lr=3e-4" -> table["train"]["lr"] = 3e-4. Values are parsed as TOML; what does not
// parse (a bare path) is taken as a string.
void apply_override(toml::table& root, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set {}: expected section.key=value, for example --set train.lr=3e-4", text);
  const std::string path = text.substr(0, eq), value = text.substr(eq + 1);
  const auto dot = path.find('.');
  if (dot == std::string::npos)
    fail("--set {}: the key must name its section, for example train.steps", text);
  const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    refuse_out_of_range_number(text, value);
    parsed.insert_or_assign("v", value);
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  auto* table = root[section].as_table();
  if (!table) fail("--set {}: `{}` is not a section", text, section);
  table->insert_or_assign(key, *parsed["v"].node());
}

// data.train as a list of { path, weight, val } tables: moved into config.data.blend and out of
// `root`, where the string key would refuse it.
void take_blend(toml::table& root, DataConfig& data, const std::string& source) {
  auto* table = root["data"].as_table();
  const auto* list = table ? (*table)["train"].as_array() : nullptr;
  if (!list) return;
  if (list->empty()) fail("{}: data.train is an empty list: name at least one dataset", source);
  for (const auto& item : *list) {
    const auto* entry = item.as_table();
    if (!entry || !(*entry)["path"].is_string())
      fail("{}: each data.train entry must be a table with a path, like "
           "{{ path = \"a.bin\", weight = 0.5 }}",
           source);
    DataSource d{.path = *(*entry)["path"].value<std::string>()};
    for (const auto& [key, value] : *entry) {
      if (key == "weight" && value.is_number())
        d.weight = *value.value<double>();
      else if (key == "val" && value.is_string())
        d.val = *value.value<std::string>();
      else if (key != "path")
        fail("{}: data.train entry {}: `{}` is not path, weight (a number) or val (a string)",
             source, d.path, key.str());
    }
    if (!(d.weight > 0))
      fail("{}: data.train entry {}: weight {} must be positive", source, d.path, d.weight);
    data.blend.push_back(std::move(d));
  }
  data.train = data.blend.front().path;
  table->erase("train");
}

// Whether two models have the same weights' shapes and architecture (context length, norm
// epsilon, init and RoPE base aside).
bool same_shape(const ModelConfig& a, const ModelConfig& b) {
  return a.family == b.family && a.n_layer == b.n_layer && a.d_model == b.d_model &&
         a.n_head == b.n_head && a.kv_heads() == b.kv_heads() && a.d_ff == b.d_ff &&
         a.vocab_size == b.vocab_size;
}

// A model that is not its preset's shape is named by family and size, e.g. "gpt2-3.4M", so
// that logs and checkpoints do not call it by the preset it started from.
std::string custom_model_name(const ModelConfig& m) {
  const double n = parameter_count_double(m);
  return n >= 1e9 ? fmt::format("{}-{:.1f}B", name_of(m.family), n / 1e9)
                  : fmt::format("{}-{:.1f}M", name_of(m.family), n / 1e6);
}

}  // namespace

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  toml::table root;
  if (!path.empty()) {
    if (!std::filesystem::exists(path)) fail("config file {} does not exist", path);
    if (std::filesystem::is_directory(path))
      fail("config file {} is a directory: name a .toml file (configs/ has examples)", path);
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      fail("{}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column,
           e.description());
    }
  }
  // A --set of either validation-size key replaces the other one from the file (an old script's
  // train.eval_batches over a config of eval_sequences); both from one source conflict (below).
  for (const auto& o : overrides)
    for (const auto& [given, replaced] : {std::pair{"train.eval_batches=", "eval_sequences"},
                                         std::pair{"train.eval_sequences=", "eval_batches"}})
      if (o.rfind(given, 0) == 0)
        if (auto* train = root["train"].as_table()) train->erase(replaced);
  for (const auto& o : overrides) apply_override(root, o);

  RunConfig config;
  config.source = path.empty() ? "defaults" : path;
  const std::string& src = config.source;
  take_blend(root, config.data, src);
  std::set<std::string> known = {"model.preset"};
  if (auto preset = root["model"]["preset"]) {
    if (!preset.is_string()) fail("{}: `model.preset` must be a string", src);
    config.model = model_preset(*preset.value<std::string>());
  }
  const ModelConfig preset_model = config.model;
  for (const Key& key : keys_of(config)) {
    known.insert(key.path);
    const auto dot = key.path.find('.');
    if (auto node = root[key.path.substr(0, dot)][key.path.substr(dot + 1)])
      assign(key, *node.node(), src);
  }
  for (const auto& [section, value] : root) {
    const auto* table = value.as_table();
    if (!table) fail("{}: `{}` must be a [section]", src, section.str());
    for (const auto& [key, _] : *table) {
      const std::string full = fmt::format("{}.{}", section.str(), key.str());
      if (!known.count(full))
        fail("{}: unknown key `{}` (see docs/config.md or `kintsugi train --help-config`)", src,
             full);
    }
  }
  if (root["train"]["eval_sequences"] && config.train.eval_batches > 0)
    fail("{}: train.eval_sequences and the deprecated train.eval_batches are both set: keep "
         "train.eval_sequences only",
         src);
  validate(config);  // first: naming the model counts its parameters, which divides by n_head
  if (!same_shape(config.model, preset_model)) config.model.name = custom_model_name(config.model);
  return config;
}

void validate(const RunConfig& c) {
  validate(c.model);
  const TrainConfig& t = c.train;
  auto positive = [](const char* key, auto v) {
    if (!(v > 0)) fail("train.{} = {} must be positive", key, v);
  };
  if (t.steps <= 0)
    fail("train.steps = {} must be positive (to measure a model's loss without training it, use "
         "`kintsugi eval`)",
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
  if (c.comm.backend == CommBackend::nccl && c.train.device != Device::cuda)
    fail("comm.backend = \"nccl\" moves GPU memory: it needs train.device = \"cuda\"");
}

LrSchedule lr_schedule_of(const TrainConfig& t) {
  const std::int64_t decay = t.decay_steps > 0 ? t.decay_steps : t.steps;
  return {.max_lr = t.lr, .min_lr = t.min_lr, .warmup_steps = std::min(t.warmup_steps, decay),
          .decay_steps = decay, .shape = t.lr_schedule, .decay_fraction = t.lr_decay_fraction};
}

std::int64_t eval_sequences_of(const TrainConfig& t) {
  return t.eval_batches > 0 ? t.eval_batches * t.micro_batch : t.eval_sequences;
}

std::vector<std::string> config_notes(const RunConfig& c) {
  std::vector<std::string> notes;
  const LrSchedule s = lr_schedule_of(c.train);
  if (s.warmup_steps < c.train.warmup_steps)
    notes.push_back(fmt::format("note: train.warmup_steps = {} is longer than the run "
                                "(train.steps = {}): warming up over {} steps instead",
                                c.train.warmup_steps, c.train.steps, s.warmup_steps));
  if (c.train.eval_batches > 0)
    notes.push_back(fmt::format("note: train.eval_batches is deprecated: it validates on "
                                "eval_batches {} x micro_batch {} = {} windows, a set that changes "
                                "with the micro-batch; set train.eval_sequences = {} instead",
                                c.train.eval_batches, c.train.micro_batch,
                                eval_sequences_of(c.train), eval_sequences_of(c.train)));
  return notes;
}

LayoutSpec layout_spec(const RunConfig& c) {
  return {.parallel = c.parallel, .global_batch = c.train.global_batch,
          .micro_batch = c.train.micro_batch};
}

void resolve_layout(RunConfig& c, int world) {
  c.parallel = c.parallel.resolved(world);
  if (const std::string problem = layout_problem(c.model, layout_spec(c)); !problem.empty())
    fail("{}", problem);
  // Every batch of a ramp-up is split over the same layout (train/batch_rampup.hpp).
  for (std::int64_t batch :
       ramp_batches_to_check(batch_rampup_of(c.train), c.train.global_batch)) {
    LayoutSpec spec = layout_spec(c);
    spec.global_batch = batch;
    if (const std::string problem = layout_problem(c.model, spec); !problem.empty())
      fail("train.batch_rampup passes through a global batch of {}: {}", batch, problem);
  }
}

namespace {

// toml++ (as Debian builds it) writes a float with 17 significant digits, so 0.55 reads back as
// 0.55000000000000004 in a written config. Each float of the text is rewritten as the shortest
// decimal that reads back to the same double (std::to_chars), so a written file shows the
// numbers a user typed. Strings and comments are left alone; integers are not floats.
std::string with_shortest_floats(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  const auto starts_value = [&](std::size_t at) {
    if (at == 0) return false;
    std::size_t j = at;
    while (j > 0 && text[j - 1] == ' ') --j;
    return j > 0 && (text[j - 1] == '=' || text[j - 1] == '[' || text[j - 1] == ',');
  };
  while (i < text.size()) {
    const char ch = text[i];
    if (ch == '"' || ch == '\'') {  // a string, copied whole (basic strings have escapes)
      std::size_t j = i + 1;
      while (j < text.size() && text[j] != ch) j += (ch == '"' && text[j] == '\\') ? 2 : 1;
      j = std::min(j + 1, text.size());
      out.append(text, i, j - i);
      i = j;
      continue;
    }
    if (ch == '#') {  // a comment, to the end of its line
      const std::size_t j = std::min(text.find('\n', i), text.size());
      out.append(text, i, j - i);
      i = j;
      continue;
    }
    if ((std::isdigit(static_cast<unsigned char>(ch)) || ch == '-' || ch == '+') &&
        starts_value(i)) {
      std::size_t j = i;
      while (j < text.size() && std::string_view("0123456789.eE+-").find(text[j]) != std::string_view::npos)
        ++j;
      const std::string_view token(text.data() + i, j - i);
      double v = 0;
      const char* first = token.data() + (token.front() == '+' ? 1 : 0);
      const auto parsed = std::from_chars(first, token.data() + token.size(), v);
      if (token.find_first_of(".eE") != std::string_view::npos && parsed.ec == std::errc() &&
          parsed.ptr == token.data() + token.size()) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof(buf), v);
        std::string shortest(buf, r.ptr);
        if (shortest.find_first_of(".e") == std::string::npos) shortest += ".0";
        out += shortest;
      } else {
        out.append(token);
      }
      i = j;
      continue;
    }
    out += ch;
    ++i;
  }
  return out;
}

}  // namespace

std::string run_config_toml(const RunConfig& config) {
  RunConfig c = config;
  // The deprecated key is written as the number of windows it meant.
  c.train.eval_sequences = eval_sequences_of(c.train);
  c.train.eval_batches = 0;
  toml::table root;
  const auto presets = model_preset_names();
  if (std::find(presets.begin(), presets.end(), c.model.name) != presets.end())
    root.insert_or_assign("model", toml::table{{"preset", c.model.name}});
  for (const Key& key : keys_of(c)) {
    const auto dot = key.path.find('.');
    const std::string section = key.path.substr(0, dot);
    if (!root.contains(section)) root.insert(section, toml::table{});
    insert_value(*root[section].as_table(), key.path.substr(dot + 1), key.target);
  }
  if (!c.data.blend.empty()) {
    toml::array blend;
    for (const DataSource& d : c.data.blend) {
      toml::table entry{{"path", d.path}, {"weight", d.weight}};
      if (!d.val.empty()) entry.insert("val", d.val);
      blend.push_back(std::move(entry));
    }
    root["data"].as_table()->insert_or_assign("train", std::move(blend));
  }
  std::ostringstream out;
  out << toml::toml_formatter(root);
  return with_shortest_floats(out.str()) + "\n";
}

namespace {

// A blend as the config file writes it (one list), or "" for a single data.train.
std::string blend_text(const DataConfig& data) {
  std::string text;
  for (const DataSource& d : data.blend)
    text += fmt::format("{}{{ path = \"{}\", weight = {}{} }}", text.empty() ? "[" : ", ", d.path,
                        d.weight, d.val.empty() ? "" : fmt::format(", val = \"{}\"", d.val));
  return text.empty() ? text : text + "]";
}

}  // namespace

std::vector<ConfigChange> config_changes(const RunConfig& before, const RunConfig& after) {
  RunConfig a = before, b = after;
  // The deprecated key compared as the windows it means, as the file writes it.
  for (RunConfig* c : {&a, &b}) {
    c->train.eval_sequences = eval_sequences_of(c->train);
    c->train.eval_batches = 0;
  }
  const std::vector<Key> ka = keys_of(a), kb = keys_of(b);
  std::vector<ConfigChange> changes;
  for (std::size_t i = 0; i < ka.size(); ++i) {
    std::string was = value_text(ka[i].target), now = value_text(kb[i].target);
    if (ka[i].path == "data.train" && !(a.data.blend.empty() && b.data.blend.empty())) {
      if (!a.data.blend.empty()) was = blend_text(a.data);
      if (!b.data.blend.empty()) now = blend_text(b.data);
    }
    if (was != now) changes.push_back({ka[i].path, std::move(was), std::move(now)});
  }
  return changes;
}

std::vector<ConfigKeyDoc> run_config_keys() {
  RunConfig defaults;
  std::vector<ConfigKeyDoc> docs = {
      {"model.preset", "string", "\"gpt-tiny\"",
       fmt::format("start from a preset ({}); other model.* keys override it",
                   fmt::join(model_preset_names(), ", "))}};
  for (const Key& k : keys_of(defaults))
    docs.push_back({k.path, type_name(k.target), value_text(k.target), k.doc});
  return docs;
}

std::set<std::string> given_keys(const std::string& path,
                                 const std::vector<std::string>& overrides) {
  toml::table root;
  if (!path.empty()) root = toml::parse_file(path);  // load_run_config has checked it
  for (const auto& o : overrides) apply_override(root, o);
  std::set<std::string> keys;
  for (const auto& [section, value] : root)
    if (const auto* table = value.as_table())
      for (const auto& [key, _] : *table) keys.insert(fmt::format("{}.{}", section.str(), key.str()));
  return keys;
}

}  // namespace kintsugi
