#pragma once
// The planner's cost model: memory per device and time per optimizer step of one layout on one
// cluster, with a breakdown. It adds time to the arithmetic the runtime is already held to
// (docs/design.md principle 7): FLOPs from flops.hpp, model-state and activation bytes from
// memory.hpp (the trainer's memory_bytes_theory), bytes on the wire from comm_volume.hpp (its
// comm_bytes_per_step_theory), micro-batches in flight and the bubble from pipeline_schedule.hpp,
// stage sizes from stage_partition.hpp, which groups cross nodes from LayoutMap.
//
// Step time of the slowest pipeline stage (docs/planner.md states every term):
//   t_mb      = compute of one micro-batch (its hardware FLOPs / (peak x GEMM efficiency),
//               plus the memory-bound kernels' traffic / memory bandwidth)
//               + its tensor-parallel collectives (bytes / bandwidth + ring steps x latency;
//               with a tensor grid, what computation does not hide of each layer's collectives
//               on its group's link: grid_cost.hpp)
//   compute   = m t_mb's compute part, tp = m t_mb's collective part
//   bubble    = bubble_fraction / (1 - bubble_fraction) x m t_mb = (p - 1) t_mb / v
//   pp        = point-to-point activations and gradients (a stage's sends; its receives too
//               with blocking p2p, PipelineP2p), and the tied-embedding sum
//   dp        = data-parallel / ZeRO traffic not hidden behind backward: gradient reductions
//               overlap the last micro-batch's backward (the runtime reduces buckets as
//               gradients become final), parameter all-gathers do not overlap
//   optimizer = bytes AdamW and the gradient norm read and write / device memory bandwidth
//   host      = the cluster's host.step_overhead_ms
//   step      = compute + tp + bubble + pp + dp + optimizer + host
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kintsugi/core/enum_names.hpp"
#include "kintsugi/core/layout_pins.hpp"
#include "kintsugi/core/precision.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/parallel/layout_rules.hpp"
#include "kintsugi/parallel/pipeline_schedule.hpp"
#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/plan/comm_volume.hpp"

namespace kintsugi {

// The attention kernel of the predicted run: kintsugi's flash-style kernel (a log-sum-exp per
// row and head, the probabilities recomputed in backward), or one that writes the s x s scores,
// softmax and dropout to memory (Megatron-LM's fused softmax, as in Korthikanti et al.): 5 a s^2
// bytes per sequence, layer and tensor-parallel share, written and read.
enum class AttentionKernel : std::uint8_t { flash, materialized };
template <>
struct EnumNames<AttentionKernel> {
  static constexpr std::array values = {std::pair{AttentionKernel::flash, "flash"},
                                        std::pair{AttentionKernel::materialized, "materialized"}};
};

// How the pipeline's point-to-point transfers sit on a stage's timeline (docs/planner.md, "Step
// time"). async (kintsugi's executor, parallel/pipeline_executor.cpp): receives are posted ahead
// and overlap compute, a stage's sends are exposed. blocking (DeepSpeed's pipeline engine, used
// by Megatron-DeepSpeed, whose p2p send and recv refuse async_op and call torch.distributed's
// blocking send/recv, one instruction after another): every send and every receive of a stage
// is on its timeline, twice the async time, and each fill and drain slot of the bubble carries a
// micro-batch's transfers too.
enum class PipelineP2p : std::uint8_t { async, blocking };
template <>
struct EnumNames<PipelineP2p> {
  static constexpr std::array values = {std::pair{PipelineP2p::async, "async"},
                                        std::pair{PipelineP2p::blocking, "blocking"}};
};

struct Workload {
  ModelConfig model;               // model.seq_len is the training sequence length
  std::int64_t global_batch = 1;   // sequences per optimizer step
  Precision precision = Precision::bf16;
  GradPrecision grad_precision = GradPrecision::fp32;
  double bucket_mib = 25;          // data-parallel bucket (parallel.bucket_mib)
  AttentionKernel attention = AttentionKernel::flash;
  PipelineP2p p2p = PipelineP2p::async;
};

// A candidate of the search: the layout record with the micro-batch and the recomputation it
// trains with.
struct Layout {
  ParallelLayout parallel;
  std::int64_t micro_batch = 1;
  Recompute recompute = Recompute::none;
  bool operator==(const Layout&) const = default;
  std::int64_t micro_batches(std::int64_t global_batch) const {
    return global_batch / (micro_batch * parallel.dp);
  }
};
// "tp 4 pp 2 dp 8 mb 1 1f1b zero 1 selective sp"; a grid: "tp 8 grid 2x2x2 pp 1 ..." (and
// "no-overlap" when its collectives do not overlap computation).
std::string describe(const Layout& l);
// What describe's words mean, for a table of described layouts (lines of at most 100 columns).
std::string describe_legend();

// Dimensions whose cost terms were compared with measured runs on this machine's CPUs only (the
// grid's: docs/benchmarks.md) are searched on a cluster a spec describes only when pinned:
// unless `measured` (this machine, or a spec tune refit), each such dimension not pinned is
// pinned to its default (the grid to none, 1D tensor parallelism). Returns a note per
// dimension so pinned, for the plan to print.
std::vector<std::string> pin_unmeasured_dimensions(LayoutPins& pins, bool measured);

struct MemoryPrediction {  // bytes per device, on the fullest pipeline stage
  double parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;
  double communication = 0;  // buckets, pipeline send/receive buffers, ZeRO-3 staging
  double reserved = 0;       // the cluster's per-device reserve
  double total() const {
    return parameters + gradients + optimizer_state + activations + communication + reserved;
  }
};

struct TimePrediction {  // seconds per optimizer step
  double compute = 0, tp = 0, pp = 0, dp = 0, bubble = 0, optimizer = 0;
  double cp = 0;    // context parallelism: the all-to-all around attention; the ring, its exposed part
  double ep = 0;    // expert parallelism: the token rows' all-to-all (blocking: all exposed)
  double host = 0;  // the cluster's per-step host overhead
  double total() const { return compute + tp + pp + dp + cp + ep + bubble + optimizer + host; }
};

struct Prediction {
  Layout layout;
  MemoryPrediction memory;
  MemoryPrediction first_stage_memory;  // pipeline rank 0 (world rank 0, what run.json describes)
  // Bytes world rank 0 sends per step, per group and collective (comm_volume.hpp: what
  // run.json's comm_bytes_per_step_theory and the communicator's counters hold).
  std::map<std::string, double> first_stage_comm_bytes;
  TimePrediction time;
  bool fits = false;
  double gemm_efficiency = 0;  // FLOP-weighted over the step's GEMMs
  double tokens_per_s = 0, samples_per_s = 0, mfu = 0, hfu = 0;
  bool tp_crosses_nodes = false, pp_crosses_nodes = false, dp_crosses_nodes = false;
};

// The layout with a global batch as the rule book reads it (parallel/layout_rules.hpp).
LayoutSpec layout_spec(const Layout& l, std::int64_t global_batch);
// Empty when the runtime would accept the layout for this workload on its world size; else the
// reason: parallel/layout_rules.hpp's layout_problem, the runtime's own rule book.
std::string layout_problem(const Workload& w, const Layout& l);

// The layout's share of the communication input (comm_volume.hpp): batch, ZeRO sharding,
// element sizes, recomputation. The caller adds what one rank holds (parameter elements, blocks,
// pipeline ends), counted from the model (the planner) or from the rank's buffers (the trainer).
StepShape layout_step_shape(const Workload& w, const Layout& l);
// Activation-sized tensors global chunk `chunk` of `chunks` sends per micro-batch: its output
// forward unless it ends the model, its input gradient backward unless it starts it.
std::int64_t pipeline_sends(int chunk, int chunks);

// The layout must be valid (layout_problem empty).
Prediction predict(const Workload& w, const ClusterSpec& cluster, const Layout& l);

// Activation slots of a pipeline rank (pipeline_schedule's activation_slots, cached: the
// planner asks for the same shapes many times).
int slots_in_flight(PipelineSchedule s, int stages, int virtual_stages, int micro_batches,
                    int rank);

}  // namespace kintsugi
