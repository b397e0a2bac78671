#pragma once
// Where this process sits in the job: its coordinates and the groups it talks to. A single
// process (no topology) is a job of one.
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/comm/tensor_parallel.hpp"

namespace kintsugi {

struct Place {
  const Topology* topology = nullptr;
  TensorParallel tp;
  // The ranks with the same weights and other tokens, which sum gradients, shard ZeRO state
  // and add up the loss: the data-parallel group, with context parallelism its dp x cp ranks
  // (Topology::data()); null when there is one.
  Communicator* data = nullptr;
  Communicator* pp = nullptr;         // null with one pipeline stage
  Communicator* embedding = nullptr;  // first + last stage, with pipeline parallelism
  Communicator* shard = nullptr;      // hybrid sharding: shard group and replica group
  Communicator* replica = nullptr;
  int dp_rank = 0, dp_size = 1, pp_rank = 0, pp_size = 1, world = 1;
  // Context parallelism: the group splitting each sequence (null with cp 1) and this rank's
  // place in it.
  Communicator* cp = nullptr;
  int cp_rank = 0, cp_size = 1;
  // 3D tensor parallelism: the tensor-parallel group's grid (null without one), and this rank's
  // z, which picks its share of every micro-batch's sequences (depth_size shares).
  const TensorGrid* grid = nullptr;
  int depth_rank = 0, depth_size = 1;
  // Expert parallelism (docs/moe.md): the ranks splitting the experts and those holding the
  // same experts; null without it.
  Communicator* ep = nullptr;
  Communicator* edp = nullptr;
  bool chief = true;  // speaks for the job: logs, metrics, checkpoint

  Place() = default;
  Place(const Topology* t, bool sequence_parallel) : topology(t) {
    if (!t) return;
    tp = TensorParallel(t->tp(), sequence_parallel);
    dp_rank = t->coords().dp;
    dp_size = t->dp().size();
    pp_rank = t->coords().pp;
    pp_size = t->pp().size();
    cp_rank = t->coords().cp;
    cp_size = t->cp().size();
    if (cp_size > 1) cp = &t->cp();
    if (t->data().size() > 1) data = &t->data();
    if (pp_size > 1) pp = &t->pp();
    embedding = t->embedding();
    shard = t->shard();
    replica = t->replica();
    ep = t->expert();
    edp = t->expert_data();
    grid = t->grid();
    if (grid) {
      depth_rank = grid->coords().z;
      depth_size = grid->shape().z;
    }
    world = t->world().size();
    chief = t->world().rank() == 0;
  }
};

}  // namespace kintsugi
