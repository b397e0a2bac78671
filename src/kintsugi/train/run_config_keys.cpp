#include "kintsugi/train/run_config_keys.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <sstream>

#include "kintsugi/core/error.hpp"

namespace kintsugi::config_keys {

// The one list of keys.
std::vector<Key> keys_of(RunConfig& c) {
  return {
      {"model.family", &c.model.family,
       "architecture family: \"gpt2\", \"llama\" (RoPE, RMSNorm, SwiGLU, GQA), \"mistral\" "
       "(Llama's block, sliding-window attention), \"qwen2\" (Llama's block, qkv biases), "
       "\"qwen3\" (Llama's block, q/k RMSNorm) or \"bloom\" (ALiBi, embedding LayerNorm)"},
      {"model.n_layer", &c.model.n_layer, "transformer blocks"},
      {"model.d_model", &c.model.d_model, "hidden size"},
      {"model.n_head", &c.model.n_head, "attention heads (must divide d_model unless model.head_dim is set)"},
      {"model.n_kv_head", &c.model.n_kv_head,
       "key/value heads for grouped-query attention (must divide n_head; 0: n_head)"},
      {"model.d_ff", &c.model.d_ff, "MLP width (4 * d_model for GPT-2)"},
      {"model.vocab_size", &c.model.vocab_size, "vocabulary size (50257 for GPT-2's BPE)"},
      {"model.seq_len", &c.model.seq_len, "context length; training sequences have this length"},
      {"model.vocab_pad_multiple", &c.model.vocab_pad_multiple,
       "embedding rows are padded to a multiple of this (padded logits never reach the loss)"},
      {"model.norm_eps", &c.model.norm_eps, "LayerNorm / RMSNorm epsilon"},
      {"model.rope_theta", &c.model.rope_theta, "llama: base of the rotary embedding frequencies"},
      {"model.rope_scaling", &c.model.rope_scaling,
       "RoPE scaling for a longer context: \"none\", \"linear\", \"llama3\" (Llama 3.1) or "
       "\"yarn\" (config.json's rope_scaling.rope_type)"},
      {"model.rope_factor", &c.model.rope_factor,
       "RoPE scaling: how many times longer the context is than the trained one"},
      {"model.rope_low_freq_factor", &c.model.rope_low_freq_factor,
       "llama3 RoPE scaling: wavelengths beyond rope_original_context / this are interpolated"},
      {"model.rope_high_freq_factor", &c.model.rope_high_freq_factor,
       "llama3 RoPE scaling: wavelengths below rope_original_context / this are kept"},
      {"model.rope_original_context", &c.model.rope_original_context,
       "llama3 and yarn RoPE scaling: the context the model was trained at (0: model.seq_len)"},
      {"model.rope_beta_fast", &c.model.rope_beta_fast,
       "yarn RoPE scaling: dimensions turning more often than this in the original context keep "
       "their frequency"},
      {"model.rope_beta_slow", &c.model.rope_beta_slow,
       "yarn RoPE scaling: dimensions turning less often than this are fully interpolated"},
      {"model.rope_attention_factor", &c.model.rope_attention_factor,
       "yarn RoPE scaling: queries and keys are scaled by this (0: 0.1 ln(rope_factor) + 1)"},
      {"model.head_dim", &c.model.head_size,
       "attention head size (0: d_model / n_head; Qwen3 and Mistral-Nemo set their own)"},
      {"model.sliding_window", &c.model.sliding_window,
       "sliding-window attention: each query sees itself and the sliding_window - 1 keys before "
       "it (Mistral); 0: the whole causal context"},
      {"model.tie_embeddings", &c.model.tie_embeddings,
       "whether the LM head is the token embedding: \"family\" (gpt2 and bloom tied, llama "
       "untied), \"tied\" or \"untied\""},
      {"model.moe_experts", &c.model.moe.experts,
       "mixture of experts: SwiGLU experts per block's MLP (0: a dense MLP; docs/moe.md)"},
      {"model.moe_top_k", &c.model.moe.top_k,
       "mixture of experts: experts each token is routed to (1 to model.moe_experts)"},
      {"model.moe_expert_hidden", &c.model.moe.expert_hidden,
       "mixture of experts: each expert's SwiGLU width (0: model.d_ff)"},
      {"model.moe_shared_experts", &c.model.moe.shared_experts,
       "mixture of experts: a shared SwiGLU of this many experts' width that every token goes "
       "through, behind a sigmoid gate (Qwen2-MoE; 0: none)"},
      {"model.moe_shared_hidden", &c.model.moe.shared_hidden,
       "mixture of experts: the shared expert's width (0: shared_experts x expert_hidden)"},
      {"model.moe_router_norm_topk", &c.model.moe.renormalize,
       "mixture of experts: divide the top_k gates by their sum (Mixtral) or keep the softmax "
       "probabilities (Qwen2-MoE's norm_topk_prob = false)"},
      {"model.moe_capacity_factor", &c.model.moe.capacity_factor,
       "mixture of experts: 0 dropless; else each expert takes at most ceil(factor x rows x "
       "top_k / experts) of a micro-batch's routed rows, lower token rows first, and the rest "
       "are dropped (counted in metrics.jsonl's moe_dropped_fraction)"},
      {"model.moe_router_score", &c.model.moe.score,
       "mixture of experts: the router's score, \"softmax\" (Mixtral, Qwen) or \"sigmoid\" "
       "(DeepSeek-V3: each expert's sigmoid, the chosen ones' divided by their sum with "
       "model.moe_router_norm_topk; docs/moe.md)"},
      {"model.moe_routed_scaling_factor", &c.model.moe.routed_scaling,
       "mixture of experts: the routed experts' gates multiplied by this (DeepSeek-V3: 2.5)"},
      {"model.moe_router_groups", &c.model.moe.groups,
       "mixture of experts: group-limited routing, the experts in this many equal groups (1: "
       "off); a group's score is its two best scores' sum (DeepSeek-V3: 8)"},
      {"model.moe_router_topk_groups", &c.model.moe.topk_groups,
       "mixture of experts: the best groups whose experts top_k is chosen from (DeepSeek-V3: 4)"},
      {"model.moe_router_bias_update_rate", &c.model.moe.bias_update_rate,
       "mixture of experts: auxiliary-loss-free balancing (DeepSeek-V3: 1e-3; 0: off): a "
       "per-expert bias added to the scores for selection, after each step raised by this for "
       "the experts below the mean load and lowered for those above"},
      // Which blocks are MoE blocks (docs/moe.md, "Dense blocks").
      {"model.moe_first_dense_layers", &c.model.moe.first_dense, "mixture of experts: blocks 0 "
       "to this - 1 have the dense SwiGLU MLP of width model.d_ff (first_k_dense_replace)"},
      {"model.moe_layer_freq", &c.model.moe.layer_freq,
       "mixture of experts: from block k = model.moe_first_dense_layers on, block i is a "
       "MoE block when (i - k + 1) % this == 0, the others dense (Qwen2-MoE's "
       "decoder_sparse_step)"},
      {"model.moe_dense_layers", &c.model.moe.dense_layers,
       "mixture of experts: dense blocks whatever the two keys above say (Qwen2-MoE's "
       "mlp_only_layers), e.g. [0, 5]"},
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
      {"train.moe_aux_loss_coeff", &c.train.moe_aux_loss_coeff,
       "mixture of experts: weight of each MoE layer's load-balancing loss (Switch/GShard) in "
       "the objective"},
      {"train.moe_z_loss_coeff", &c.train.moe_z_loss_coeff,
       "mixture of experts: weight of each MoE layer's router z-loss (ST-MoE) in the objective"},
      {"train.max_memory_gb", &c.train.max_memory_gb,
       "GiB of tracked memory a rank may hold (0: no limit); a run that needs more is refused "
       "before its first step"},
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
      {"parallel.dp", &c.parallel.dp, "data-parallel ranks (0: world size / (tp * pp * cp))"},
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
      {"parallel.cp", &c.parallel.cp,
       "context-parallel ranks: every sequence split over them (long contexts); gradients "
       "and ZeRO state over dp x cp"},
      {"parallel.cp_comm", &c.parallel.cp_comm,
       "how context-parallel ranks exchange around attention: \"all_to_all\" (Ulysses: heads "
       "for sequence; kv heads divisible by tp x cp) or \"ring\" (key/value chunks passed "
       "around the ranks, causal work balanced; seq_len divisible by 2 x cp; fp32 only)"},
      {"parallel.ep", &c.parallel.ep,
       "expert parallelism: a mixture of experts' experts split over this many data-parallel "
       "ranks (dividing dp; model.moe_experts divisible by it), tokens exchanged by "
       "all-to-all; the experts' gradients and ZeRO state over the dp / ep ranks"},
      {"parallel.order", &c.parallel.order,
       "rank order, fastest-varying dimension first (\"tp-dp-pp\"; cp, when not named, right "
       "after tp)"},
      {"parallel.bucket_mib", &c.comm.bucket_mib,
       "data-parallel gradient bucket size in MiB (reduced while backward goes on)"},
      {"parallel.zero", &c.parallel.zero,
       "ZeRO stage: 0 replicated, 1 shards optimizer state, 2 also gradients, 3 also weights"},
      {"parallel.hsdp", &c.parallel.hsdp,
       "hybrid sharding: shard over groups of this many data-parallel ranks (of dp x cp with "
       "context parallelism), replicate across groups (0: shard over all)"},
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

}  // namespace kintsugi::config_keys
