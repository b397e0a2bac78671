#pragma once
// Every rank of a job must train one configuration on the same data. Ranks launched with
// different files (an MPMD launch, nodes that read different copies of a config or a token file)
// would otherwise train replicas that silently disagree, or build process groups that do not
// match and abort inside MPI. Before any group is built, each rank's resolved configuration and
// a fingerprint of its token files are compared with rank 0's.
#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/trainer.hpp"

namespace kintsugi {

// The text compared, one "key = value" a line: the configuration without the data paths (node-
// local copies may live elsewhere), then each token source's length and sampled contents.
std::string config_fingerprint(const RunConfig& config, const TrainInputs& inputs);

// The first key on which `theirs` differs from `mine` (both config_fingerprint texts), as
// "train.lr = 0.001 (rank 0) vs 0.002"; empty when equal.
std::string first_difference(const std::string& mine, const std::string& theirs);

// Collective over `world`: a mismatch is reported once (rank 0), naming the first differing key
// and the ranks that differ, and every rank throws AlreadyReported. `flags`: more lines
// "key = value" compared first (the command's own flags, such as where it writes).
void agree_on_config(Communicator& world, const RunConfig& config, const TrainInputs& inputs,
                     const std::string& flags = "");

}  // namespace kintsugi
