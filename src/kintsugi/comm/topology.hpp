#pragma once
// Where each rank sits in the 3D layout, computed once and nowhere else (docs/design.md
// principle 3). world = tp x dp x pp x cp; the order string names the dimensions from fastest- to
// slowest-varying. The default "tp-dp-pp" keeps tensor-parallel groups on adjacent ranks (inside
// a node, where their frequent all-reduces are cheap) and pipeline stages outermost (their
// point-to-point transfers are the traffic that can best cross nodes).
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/grid_groups.hpp"
#include "kintsugi/core/parallel_layout.hpp"

namespace kintsugi {

struct RankCoords {
  int tp = 0, dp = 0, pp = 0, cp = 0;
  int operator[](Dim d) const {
    return d == Dim::tp ? tp : d == Dim::dp ? dp : d == Dim::pp ? pp : cp;
  }
  int& at(Dim d) { return d == Dim::tp ? tp : d == Dim::dp ? dp : d == Dim::pp ? pp : cp; }
};

// Pure rank arithmetic, no communication: usable by `kintsugi layout` and the planner.
class LayoutMap {
 public:
  // Throws kintsugi::Error naming the value to change when world != tp * dp * pp * cp or the layout
  // is not consistent in itself (ParallelLayout::problem).
  LayoutMap(int world, ParallelLayout layout);
  int world() const { return world_; }
  const ParallelLayout& layout() const { return layout_; }
  int size(Dim d) const;
  RankCoords coords(int rank) const;
  int rank(const RankCoords& c) const;
  // World ranks of the group along `d` that contains `rank`, in group-rank order.
  std::vector<int> group(int rank, Dim d) const;
  // All groups along `d`, each in group-rank order.
  std::vector<std::vector<int>> groups(Dim d) const;

 private:
  int world_;
  ParallelLayout layout_;
  std::array<Dim, kDims> order_;  // fastest first
};

// This rank's place and the communicator of each of its groups.
class Topology {
 public:
  Topology(std::shared_ptr<Communicator> world, const ParallelLayout& layout);
  const LayoutMap& map() const { return map_; }
  const RankCoords& coords() const { return coords_; }
  Communicator& world() const { return *world_; }
  Communicator& tp() const { return *tp_; }
  Communicator& dp() const { return *dp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& cp() const { return *cp_; }
  // The ranks holding the same weights and seeing different tokens, over which gradients are
  // summed and ZeRO state sharded: the dp group, or with context parallelism the dp x cp
  // ranks (group "dp_cp").
  Communicator& data() const { return dp_cp_ ? *dp_cp_ : *dp_; }
  // The first and last pipeline stages of this rank's (tp, dp) position, which hold the two
  // copies of the tied token embedding; null on other stages and without pipeline parallelism.
  Communicator* embedding() const { return embedding_.get(); }
  // Hybrid sharding: the hsdp consecutive data-parallel ranks sharing one copy of the state,
  // and the ranks holding the same shard in the other copies; null without hybrid sharding.
  Communicator* shard() const { return shard_.get(); }
  Communicator* replica() const { return replica_.get(); }
  // Expert parallelism (ParallelLayout::ep): the ep consecutive data-parallel ranks that split
  // the experts between them ("ep"), and the dp / ep ranks holding the same experts ("edp");
  // null without expert parallelism.
  Communicator* expert() const { return ep_.get(); }
  Communicator* expert_data() const { return edp_.get(); }
  // 3D tensor parallelism: the tensor-parallel group's grid; null without a grid.
  const TensorGrid* grid() const { return grid_.get(); }
  // Every group this rank belongs to, for byte accounting.
  std::vector<Communicator*> groups() const;

 private:
  LayoutMap map_;
  RankCoords coords_;
  std::shared_ptr<Communicator> world_, tp_, dp_, pp_, cp_, dp_cp_, embedding_, shard_, replica_,
      ep_, edp_;
  std::unique_ptr<TensorGrid> grid_;
};

}  // namespace kintsugi
