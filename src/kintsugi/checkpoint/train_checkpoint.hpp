#pragma once
// Training checkpoints: the whole state of a run, saved by every rank in parallel and loadable
// into any other layout (docs/checkpoints.md).
//
// A checkpoint directory holds one shard file per rank that owns state ("rank-00003.bin") and
// manifest.json. A shard file is a sequence of *pieces*: for one parameter, a contiguous range
// of a rank's tensor-parallel slice of it, as float32 weights (the master copy under mixed
// precision), then AdamW's first and second moments of the same elements. The manifest
// describes each piece in global terms (tensor, the slice's shape and offset along the split
// dimension, the element range), every tensor's global shape (without vocabulary padding) and
// split dimension, each file's size and XXH3-64 checksum, the model configuration, the layout
// that wrote it, and the step, optimizer step count and loss-scaler state.
//
// Loading assembles each tensor it needs from the pieces that cover it and copies out the
// elements this rank owns in its own layout, so tensor-, pipeline- and data-parallel degree
// and ZeRO stage may all differ from the writer's.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/fault_hooks.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/optim/loss_scaler.hpp"
#include "kintsugi/parallel/sharded_state.hpp"

namespace kintsugi {

// This rank's part of the training state.
struct RankState {
  std::vector<const ParamStore*> params;  // one per local model chunk
  std::vector<ShardedState*> states;      // the chunks' storage and optimizer
  int tp_rank = 0;                        // replicated tensors are saved by tp rank 0
  Communicator* world = nullptr;          // null: a single process
};

// Everything besides the tensors that a resumed run needs to continue exactly.
struct TrainProgress {
  std::int64_t step = 0;             // optimizer steps done; also the data position (the batch
                                     // of step s is a pure function of (seed, s))
  std::int64_t optimizer_steps = 0;  // AdamW's bias-correction count (fp16 skips steps)
  LossScaler::State loss_scaler;
  std::int64_t seed = 0;
  // Training tokens of steps 1..step, summed at the global batch each step had (a resume may
  // change the batch). -1: not recorded (checkpoints written before it was).
  std::int64_t tokens_seen = -1;
  // Auxiliary-loss-free balancing (docs/moe.md, "DeepSeek-style routing"): every MoE layer's
  // per-expert selection bias, [layers x experts] (not a parameter; the manifest's
  // moe_router_bias, one array per layer); empty without it.
  std::vector<float> moe_router_bias;
};

// Every rank calls this; writes <root>/step-N (partial name, synced, renamed), then rank 0
// updates `latest` and keeps the newest `keep` checkpoints. `layout` is recorded for people,
// `tokenizer` (data::to_json of the data's tokenizer; null: not known) for the commands that
// check it. Returns the checkpoint directory. `die_in_save` (a fault hook, core/fault_hooks.hpp):
// that rank dies (SIGKILL) after writing its shard of that step's checkpoint, before the
// checkpoint is complete.
std::filesystem::path save_train_checkpoint(const std::filesystem::path& root,
                                            const ModelConfig& model, const nlohmann::json& layout,
                                            const TrainProgress& progress, const RankState& rank,
                                            std::int64_t keep,
                                            const nlohmann::json& tokenizer = nullptr,
                                            const std::optional<RankStep>& die_in_save = {});

// A checked checkpoint: its manifest was read and found consistent with `model`; every piece
// lies inside its file, the pieces cover every element of every tensor exactly once, the files
// have their recorded sizes, and the files with index % world == rank match their checksums
// (so that all ranks together verify each file once). kintsugi::Error otherwise, naming the
// problem.
struct CheckpointInfo {
  std::filesystem::path dir;
  nlohmann::json manifest;
  TrainProgress progress;
};
CheckpointInfo inspect_checkpoint(const std::filesystem::path& dir, const ModelConfig& model,
                                  int rank = 0, int world = 1);

// Fills this rank's weights, optimizer moments and working copies from a checkpoint that
// inspect_checkpoint accepted; tensors are checked against this rank's parameters before any
// value is written.
void load_train_checkpoint(const CheckpointInfo& info, const RankState& rank);

// The whole tensor `name` (weights only, without vocabulary padding) and its shape, assembled
// from the pieces: for export.
std::vector<float> read_checkpoint_tensor(const CheckpointInfo& info, const std::string& name,
                                          std::vector<std::int64_t>* shape = nullptr);

}  // namespace kintsugi
