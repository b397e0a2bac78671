#pragma once
// All parameters of a model chunk live in one flat buffer, and their gradients in a second
// buffer with the same layout (DESIGN.md principle 2). Data-parallel buckets and ZeRO shards are
// byte ranges of these buffers, so sharding is arithmetic on offsets. Each parameter carries
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
  // Rows at or beyond this index of dimension 0 are padding (vocabulary padding): initialized
  // to zero and excluded from parameter counts. -1 when there is none.
  std::int64_t valid_rows = -1;
  // Replicated across tensor-parallel ranks but computed from this rank's slice of the token
  // rows (sequence parallelism): the gradient is a partial sum, all-reduced over the group.
  bool sequence_parallel_grad = false;
  // A second copy of a tied parameter that lives in another chunk (the LM head's copy of the
  // token embedding on the last pipeline stage): initialized identically, kept identical by
  // summing the copies' gradients, and counted (checkpoints, gradient norm) only once.
  bool tied_copy = false;
};

struct ParamEntry {
  ParamSpec spec;
  Shape local_shape;
  std::int64_t offset = 0;  // in elements, into the flat buffers
};

class ParamStore {
 public:
  // Registration, before allocate(): returns the parameter's index.
  int add(ParamSpec spec);
  // Allocates the flat parameter and gradient buffers (zeroed).
  void allocate(Backend& backend, DType dtype);
  // Fills every parameter from its counter-based random stream: element g of the global
  // tensor is the same number at every layout.
  void initialize(std::uint64_t seed);

  int size() const { return static_cast<int>(entries_.size()); }
  const ParamEntry& entry(int i) const { return entries_[i]; }
  Tensor param(int i) const;
  Tensor grad(int i) const;
  Tensor params() const;  // the whole flat buffer
  Tensor grads() const;
  std::int64_t numel() const { return total_; }
  DType dtype() const { return dtype_; }
  int find(const std::string& name) const;  // -1 when absent

  // Gradient bookkeeping within one optimizer step: the first write to a parameter's gradient
  // overwrites it and later writes accumulate, so the buffer never needs zeroing.
  void begin_step();
  bool accumulate_grad(int i);  // returns whether to accumulate, and marks it written
  void zero_unwritten_grads();

 private:
  std::vector<ParamEntry> entries_;
  std::vector<char> written_;
  std::int64_t total_ = 0;
  DType dtype_ = DType::f32;
  Backend* backend_ = nullptr;
  Buffer params_, grads_;
};

}  // namespace kintsugi
