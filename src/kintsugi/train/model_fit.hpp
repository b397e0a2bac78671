#pragma once
// Whether a run's model can fit at all, checked from the config's numbers before anything is
// built per block (the stage partition, the parameters, a Hugging Face folder's tensor names all
// grow with model.n_layer): a config of a billion layers is refused in one line instead of
// exhausting the machine.
//
// The bound is a floor, so that no run that fits is refused: a rank holds at least its even
// share of the parameters, P / (tp x pp) (replicated norms and the tied embedding's two stage
// copies only add to the fullest rank), and with ZeRO-3 that share again over the sharding
// group; each element costs the weight, gradient and optimizer bytes of plan/memory.hpp's model
// state. Activations and buffers come on top and are left to the run's own accounting.
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// kintsugi::Error when the bound exceeds `memory_bytes` / `ranks_sharing` (the device's memory
// and the ranks of this node that share it: the CPU's ranks per node, 1 for a GPU of its own).
// `memory_bytes` 0: unknown, nothing is checked. config's layout must be resolved
// (resolve_layout).
void check_model_fits(const RunConfig& config, double memory_bytes, int ranks_sharing);

}  // namespace kintsugi
