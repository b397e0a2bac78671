#include "kintsugi/comm/topology.hpp"

#include <fmt/format.h>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

LayoutMap::LayoutMap(int world, ParallelLayout layout) : world_(world), layout_(std::move(layout)) {
  const auto& l = layout_;
  if (const std::string problem = l.problem(); !problem.empty()) fail("{}", problem);
  if (l.world() != world) {
    const std::int64_t other = l.tp * l.pp * l.cp;
    fail("the job has {} ranks but tp {} x dp {} x pp {} x cp {} = {}: {}", world, l.tp, l.dp,
         l.pp, l.cp, l.world(),
         world % other == 0
             ? fmt::format("set --dp {} (or launch tp x dp x pp ranks)", world / other)
             : fmt::format("launch a multiple of tp x pp x cp = {} ranks, or change --tp / --pp / --cp",
                           other));
  }
  order_ = order_dims(l.order);
}

int LayoutMap::size(Dim d) const {
  return static_cast<int>(d == Dim::tp   ? layout_.tp
                          : d == Dim::dp ? layout_.dp
                          : d == Dim::pp ? layout_.pp
                                         : layout_.cp);
}

RankCoords LayoutMap::coords(int rank) const {
  KINTSUGI_ASSERT(rank >= 0 && rank < world_);
  RankCoords c;
  for (Dim d : order_) {
    c.at(d) = rank % size(d);
    rank /= size(d);
  }
  return c;
}

int LayoutMap::rank(const RankCoords& c) const {
  int r = 0;
  for (int i = kDims - 1; i >= 0; --i) r = r * size(order_[i]) + c[order_[i]];
  return r;
}

std::vector<int> LayoutMap::group(int rank, Dim d) const {
  RankCoords c = coords(rank);
  std::vector<int> members;
  for (int i = 0; i < size(d); ++i) {
    RankCoords m = c;
    m.at(d) = i;
    members.push_back(this->rank(m));
  }
  return members;
}

std::vector<std::vector<int>> LayoutMap::groups(Dim d) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_; ++r)
    if (coords(r)[d] == 0) out.push_back(group(r, d));
  return out;
}

Topology::Topology(std::shared_ptr<Communicator> world, const ParallelLayout& layout)
    : map_(world->size(), layout), coords_(map_.coords(world->rank())), world_(std::move(world)) {
  // Color each group by the coordinates it does not vary; key by the coordinate it does.
  auto make = [&](Dim d) {
    const int color = [&] {
      RankCoords c = coords_;
      c.at(d) = 0;
      return map_.rank(c);
    }();
    return world_->split(color, coords_[d], std::string(name_of(d)));
  };
  tp_ = make(Dim::tp);
  dp_ = make(Dim::dp);
  pp_ = make(Dim::pp);
  cp_ = make(Dim::cp);
  // Context parallelism: the dp x cp ranks of this (tp, pp) position, ordered dp-major.
  if (map_.size(Dim::cp) > 1) {
    RankCoords c = coords_;
    c.dp = 0;
    c.cp = 0;
    dp_cp_ = world_->split(map_.rank(c), coords_.dp * map_.size(Dim::cp) + coords_.cp, "dp_cp");
  }
  const int last = map_.size(Dim::pp) - 1;
  const bool member = last > 0 && (coords_.pp == 0 || coords_.pp == last);
  RankCoords first = coords_;
  first.pp = 0;
  embedding_ = world_->split(member ? map_.rank(first) : Communicator::kNoGroup,
                             coords_.pp == 0 ? 0 : 1, "embedding");
  grid_ = TensorGrid::of(*tp_, layout);
  // Hybrid sharding's two groups, of the ranks that share the state (dp, or dp x cp: data());
  // with hsdp = all of them there is one shard and no replica to reduce over, which is plain
  // ZeRO over that group (so its bytes are the dp group's, as the planner counts them:
  // plan/comm_volume.cpp).
  Communicator& data = this->data();
  if (layout.hsdp > 0 && layout.hsdp < data.size()) {
    const int k = static_cast<int>(layout.hsdp), r = data.rank();
    shard_ = data.split(r / k, r % k, "shard");
    replica_ = data.split(r % k, r / k, "replica");
  }
  // Expert parallelism carves groups of ep consecutive data-parallel ranks, as hybrid sharding
  // does its shards (docs/moe.md): "ep" splits the experts, "edp" holds the same experts.
  if (layout.ep > 1) {
    const int k = static_cast<int>(layout.ep), r = data.rank();
    ep_ = data.split(r / k, r % k, "ep");
    edp_ = data.split(r % k, r / k, "edp");
  }
}

std::vector<Communicator*> Topology::groups() const {
  std::vector<Communicator*> g = {tp_.get(), dp_.get(), pp_.get(), cp_.get()};
  for (Communicator* c :
       {dp_cp_.get(), embedding_.get(), shard_.get(), replica_.get(), ep_.get(), edp_.get()})
    if (c) g.push_back(c);
  if (grid_)
    for (Communicator* c : {&grid_->x(), &grid_->y(), &grid_->z(), &grid_->plane()})
      g.push_back(c);
  return g;
}

}  // namespace kintsugi
