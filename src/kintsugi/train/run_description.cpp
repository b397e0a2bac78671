#include "kintsugi/train/run_description.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "kintsugi/core/switches.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/model/config_json.hpp"
#include "kintsugi/core/parallel_layout_json.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/memory.hpp"
#include "kintsugi/train/layout_config.hpp"

namespace kintsugi {

std::string describe_numerics(const RunConfig& c) {
  const TrainConfig& t = c.train;
  std::string text = "fp32";
  if (is_mixed(t.precision))
    text = fmt::format("{} with f32 master weights, {} gradients", t.precision,
                       t.grad_precision == GradPrecision::param ? name_of(t.precision) : "f32");
  if (t.precision == Precision::fp16) text += fmt::format(", loss scale {:g} dynamic", t.loss_scale);
  if (t.recompute != Recompute::none) text += fmt::format(", recompute {}", t.recompute);
  if (t.optimizer != OptimizerKind::adamw) text += fmt::format(", {} optimizer", t.optimizer);
  if (t.lr_schedule != LrShape::cosine) text += fmt::format(", {} lr schedule", t.lr_schedule);
  return text;
}

std::string describe_layout(const RunConfig& c, const Place& place, const StageModel& model) {
  const ParallelLayout& p = c.parallel;
  if (!place.topology && p.zero > ZeroStage::none)
    return fmt::format("1 rank (serial), ZeRO-{} (nothing to shard: no effect)", p.zero);
  if (!place.topology) return "1 rank (serial)";
  return fmt::format("{} rank{} = {}", place.world, place.world == 1 ? "" : "s",
                     p.description(fmt::format("{}", fmt::join(model.partition().num_layers, " "))));
}

nlohmann::json layout_json(const RunConfig& c, const Place& place) {
  nlohmann::json j = layout_json(c.parallel);
  j["world"] = place.world;
  j["precision"] = name_of(c.train.precision);
  return j;
}

std::map<std::string, double> expected_comm_bytes(const RunConfig& c, const Place& place,
                                                  const StageModel& model) {
  // The layout's share comes from the planner's own function; what this rank holds is counted
  // from its buffers.
  const Layout layout = layout_of(c);
  StepShape shape = layout_step_shape(workload_of(c), layout);
  shape.blocks = shape.moe_blocks = 0;
  shape.embedding = shape.head = false;
  const int chunks = place.pp_size * model.virtual_stages();
  for (std::size_t i = 0; i < model.chunks().size(); ++i) {
    const ModelChunk& chunk = *model.chunks()[i];
    const ParamStore& p = chunk.params();
    shape.grad_elements += p.numel();
    for (int u = 0; u < p.units(); ++u) {
      const bool block = p.unit(u).name.rfind("blocks.", 0) == 0;
      (block ? shape.gathered_twice_elements : shape.gathered_once_elements) += p.unit(u).size();
    }
    shape.blocks += chunk.spec().num_layers;
    shape.moe_blocks += c.model.moe_blocks(chunk.spec().first_layer, chunk.spec().num_layers);
    shape.embedding |= chunk.spec().embedding;
    shape.head |= chunk.spec().head;
    shape.pipeline_sends +=
        pipeline_sends(static_cast<int>(i) * place.pp_size + place.pp_rank, chunks);
    for (int e = 0; e < p.size(); ++e) {
      const ParamEntry& entry = p.entry(e);
      if (entry.spec.sequence_parallel_grad) shape.sp_grad_elements += entry.local_shape.numel();
      if (entry.spec.head_partial_grad) shape.head_grad_elements += entry.local_shape.numel();
      if (entry.spec.depth_partial_grad) shape.depth_grad_elements += entry.local_shape.numel();
      if (chunks > 1 && c.model.tied_embeddings() && entry.spec.name == "embedding.token.weight")
        shape.tied_embedding_elements += entry.local_shape.numel();
    }
    // Expert parallelism: the experts' store, reduced over the dp / ep ranks (one unit per
    // block: gathered twice under ZeRO-3), and under sequence parallelism over tp first.
    if (const ParamStore* e = chunk.expert_params()) {
      shape.expert_grad_elements += e->numel();
      shape.expert_gathered_elements += e->numel();
      for (int x = 0; x < e->size(); ++x)
        if (e->entry(x).spec.sequence_parallel_grad)
          shape.sp_grad_elements += e->entry(x).local_shape.numel();
    }
  }
  return step_comm_bytes(c.model, c.parallel, shape);
}

namespace {

// Bytes rank 0 should hold per memory category (plan/memory.hpp).
nlohmann::json expected_memory(const RunConfig& c, const StageModel& model) {
  const Layout layout = layout_of(c);
  StateBytes state;
  double activations = 0;
  std::vector<BlockRange> blocks;
  bool head = false, embedding = false;
  for (const auto& chunk : model.chunks()) {
    const ParamStore& p = chunk->params();
    const StateBytes s = model_state_bytes(
        static_cast<double>(p.numel()), stage_number(c.parallel.zero), layout.parallel.shards(),
        static_cast<std::int64_t>(size_of(p.param_dtype())),
        static_cast<std::int64_t>(size_of(p.grad_dtype())), is_mixed(c.train.precision),
        c.train.optimizer == OptimizerKind::lion ? 1 : 2);
    state.parameters += s.parameters;
    state.gradients += s.gradients;
    state.optimizer_state += s.optimizer_state;
    // Expert parallelism: this rank's experts, sharded over the dp / ep ranks.
    if (const ParamStore* e = chunk->expert_params()) {
      const StateBytes x = model_state_bytes(
          static_cast<double>(e->numel()), stage_number(c.parallel.zero),
          layout.parallel.expert_shards(), static_cast<std::int64_t>(size_of(e->param_dtype())),
          static_cast<std::int64_t>(size_of(e->grad_dtype())), is_mixed(c.train.precision),
          c.train.optimizer == OptimizerKind::lion ? 1 : 2);
      state.parameters += x.parameters;
      state.gradients += x.gradients;
      state.optimizer_state += x.optimizer_state;
    }
    // 3D tensor parallelism: a rank holds its z's share of the sequences, whole rows of the
    // residual stream and norms, and its y's heads and MLP columns (docs/parallelism.md) -- the
    // 1D formula with tp = y on micro_batch / z sequences.
    // Context parallelism: its 1/cp of every sequence's rows.
    const ActivationShape shape{.micro_batch = c.train.micro_batch / c.parallel.row_ranks(),
                                .seq = c.model.seq_len / c.parallel.cp,
                                .tp = c.parallel.head_ranks(),
                                .sequence_parallel = c.parallel.sequence_parallel,
                                .recompute = c.train.recompute,
                                .element_bytes = static_cast<std::int64_t>(size_of(p.param_dtype())),
                                .statistic_bytes = p.param_dtype() == DType::f64 ? 8 : 4,
                                .expert_ranks = c.parallel.ep, .cp = c.parallel.cp};
    // The chunks share their slots (activation_pool.hpp): a slot holds the largest chunk's
    // blocks (with dense and MoE blocks, each position's largest) and whichever chunk's
    // embedding and head extras.
    blocks.push_back({chunk->spec().first_layer, chunk->spec().num_layers});
    head |= chunk->spec().head;
    embedding |= chunk->spec().embedding;
    activations = model.slots() * chunk_activation_bytes(c.model, shape, blocks, head, embedding);
  }
  return {{"parameters", state.parameters},
          {"gradients", state.gradients},
          {"optimizer_state", state.optimizer_state},
          {"activations", activations}};
}

}  // namespace

void write_run_description(const std::filesystem::path& path, const RunConfig& c,
                           const Place& place, const StageModel& model) {
  const ParallelLayout& p = c.parallel;
  nlohmann::json parallel = layout_json(c, place);
  parallel.erase("precision");
  parallel.erase("world");
  parallel["layers_per_chunk"] = model.partition().num_layers;
  parallel["order"] = p.order;
  const nlohmann::json j = {
      {"comm_bytes_per_step_theory", expected_comm_bytes(c, place, model)},
      {"memory_bytes_theory", expected_memory(c, model)},
      {"model", to_json(c.model)},
      {"world", place.world},
      {"parallel", parallel},
      {"global_batch", c.train.global_batch},
      {"micro_batch", c.train.micro_batch},
      {"micro_batches_per_rank", c.train.global_batch / (c.train.micro_batch * place.dp_size)},
      {"seq", c.model.seq_len},
      {"parameters", parameter_count(c.model)},
      {"active_parameters", active_parameter_count(c.model)},
      {"model_flops_per_token", model_flops_per_token(c.model, c.model.seq_len)},
      // Every environment switch's value, set or default (core/switches.hpp): what the engine
      // ran with beyond the config.
      {"switches", Switches::process().to_json()}};
  data::write_text_file(path, j.dump(2) + "\n");  // complete or not at all, as every output
}

}  // namespace kintsugi
