#pragma once
// All parameters of a model chunk live in one flat buffer, and their gradients in a second
// buffer with the same layout (docs/design.md principle 2). Data-parallel buckets and ZeRO
// shards are byte ranges of these buffers, so sharding is arithmetic on offsets. Each parameter carries
// the metadata a checkpoint needs to gather or reshard it: its global shape and which part of
// it this rank holds.
#include <cstdint>
#include <string>
#include <vector>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

enum class ParamInit { normal, zeros, ones };

struct ParamSpec {
  std::string name;     // global name, e.g. "blocks.3.attn.qkv.weight"
  Shape global_shape;   // the full tensor, as in a serial run
  ParamInit init = ParamInit::normal;
  double init_std = 0;  // for ParamInit::normal
  bool weight_decay = false;
  // Tensor parallelism: the dimension split across ranks (-1: replicated) and this rank's
  // [begin, begin + local extent) along it.
  int split_dim = -1;
  std::int64_t split_begin = 0;
  std::int64_t split_extent = 0;
  // 3D tensor parallelism (docs/parallelism.md): a weight block split
  // along dimension 0 (split_dim 0) and also along dimension 1: this rank holds columns
  // [cols_begin, cols_begin + cols_extent) (cols_extent 0: all columns).
  std::int64_t cols_begin = 0;
  std::int64_t cols_extent = 0;
  // Another tensor-parallel rank holds the same piece (a grid replicates it over some of its
  // dimensions); only the rank with this false counts it in the gradient norm and checkpoints.
  bool duplicate = false;
  // Replicated over the grid's z ranks, which see different token rows: the gradient is a
  // partial sum over them, all-reduced over z once per step.
  bool depth_partial_grad = false;
  // Rows at or beyond this index of dimension 0 are padding (vocabulary padding): initialized
  // to zero and excluded from parameter counts. -1 when there is none.
  std::int64_t valid_rows = -1;
  // Replicated across tensor-parallel ranks but computed from this rank's slice of the token
  // rows (sequence parallelism): the gradient is a partial sum, all-reduced over the group.
  bool sequence_parallel_grad = false;
  // Replicated across tensor-parallel ranks, each of which computes its gradient from its own
  // attention heads (Qwen3's q_norm and k_norm): a partial sum, all-reduced over the group
  // (with or without sequence parallelism).
  bool head_partial_grad = false;
  // A second copy of a tied parameter that lives in another chunk (the LM head's copy of the
  // token embedding on the last pipeline stage): initialized identically, kept identical by
  // summing the copies' gradients, and counted (checkpoints, gradient norm) only once.
  bool tied_copy = false;
};

struct ParamEntry {
  ParamSpec spec;
  Shape local_shape;
  std::int64_t offset = 0;  // in elements, into the (logical) flat buffers
  int unit = 0;
};

// Consecutive parameters (one layer: the embeddings, a block, the head) that are gathered,
// reduced and sharded together. Its element range [begin, end) is padded so that it splits
// into equal, aligned shards.
struct ParamUnit {
  std::string name;
  int first_param = 0, end_param = 0;
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

class ParamStore {
 public:
  // Every unit's length is padded to a multiple of unit_multiple elements (16 aligns rows to 64
  // bytes; data-parallel sharding needs shards x 16).
  explicit ParamStore(std::int64_t unit_multiple = 16) : unit_multiple_(unit_multiple) {}

  // Registration: add parameters, closing each unit with end_unit. Returns the index.
  int add(ParamSpec spec);
  void end_unit(const std::string& name);

  int size() const { return static_cast<int>(entries_.size()); }
  const ParamEntry& entry(int i) const { return entries_[i]; }
  int units() const { return static_cast<int>(units_.size()); }
  const ParamUnit& unit(int u) const { return units_[u]; }
  std::int64_t numel() const { return total_; }  // the logical flat length, padding included
  int find(const std::string& name) const;       // -1 when absent

  // Storage. Views resolve through a base pointer per unit, bound by whoever owns the storage:
  // allocate_full() (full buffers), or a sharded training state that binds a unit only while
  // it is gathered. param(i) and grad(i) of an unbound unit are an error.
  void set_storage(DType param, DType grad, Device device);
  DType param_dtype() const { return param_dtype_; }
  DType grad_dtype() const { return grad_dtype_; }
  Device device() const { return device_; }
  void bind_params(int unit, void* base);
  void bind_grads(int unit, void* base);
  bool params_bound(int unit) const { return param_base_[unit] != nullptr; }
  Tensor param(int i) const;
  Tensor grad(int i) const;

  // Full storage: one flat buffer of parameters and one of gradients, every unit bound.
  void allocate_full(Backend& backend, DType param_dtype, DType grad_dtype);
  bool full() const { return params_.data() != nullptr; }
  Tensor params() const;  // whole flat buffers (full storage only)
  Tensor grads() const;
  // Fills every parameter of full storage from its counter-based random stream.
  void initialize(std::uint64_t seed);
  // The initial values of the elements [begin, end) of the logical flat buffer (padding is 0):
  // element g of a parameter's global tensor is the same number at every layout.
  void initial_values(std::uint64_t seed, std::int64_t begin, std::int64_t end, float* out) const;

  // Gradient bookkeeping: the first write to a parameter's gradient overwrites it and later
  // writes accumulate, so no buffer needs zeroing. begin_step() (or reset_written(unit), for
  // gradients staged per micro-batch) starts over.
  void begin_step();
  void reset_written(int unit);
  bool accumulate_grad(int i);  // returns whether to accumulate, and marks it written
  // 3D tensor parallelism: marks every parameter not sharded over the grid's z as replicated
  // over z (depth_partial_grad), and a duplicate on z ranks other than 0. Before storage.
  void mark_replicated_over_depth(int z_rank);
  void zero_unwritten_grads(Backend& backend);

 private:
  std::int64_t unit_multiple_;
  std::vector<ParamEntry> entries_;
  std::vector<ParamUnit> units_;
  std::vector<char> written_;
  std::vector<void*> param_base_, grad_base_;
  std::int64_t total_ = 0;
  int open_unit_first_ = 0;
  DType param_dtype_ = DType::f32, grad_dtype_ = DType::f32;
  Device device_ = Device::cpu;
  Buffer params_, grads_;
};

}  // namespace kintsugi
