#pragma once
// Where the elements of a tensor-parallel slice lie in the whole tensor. Checkpoints store
// tensors as in a serial run without vocabulary padding rows ("stored" shape); a rank holds a
// slice of the padded tensor, split along one dimension (or whole).
#include <cstdint>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/model/param_store.hpp"

namespace kintsugi {

inline std::vector<std::int64_t> dims_of(const Shape& s) {
  return {s.dims.begin(), s.dims.begin() + s.rank};
}

// The tensor as stored: the global shape without vocabulary padding rows.
inline std::vector<std::int64_t> stored_shape(const ParamSpec& spec) {
  auto d = dims_of(spec.global_shape);
  if (spec.valid_rows >= 0) d[0] = spec.valid_rows;
  return d;
}

inline std::int64_t numel_of(const std::vector<std::int64_t>& d) {
  std::int64_t n = 1;
  for (auto x : d) n *= x;
  return n;
}

// Element k (row-major) of a slice of shape `local` that starts at `split_begin` along
// `split_dim` (-1: the whole tensor) -> its index in the stored tensor, or -1 for a vocabulary
// padding row. Tensors have one or two dimensions. A 3D tensor grid's weight piece is split
// along rows (split_dim 0) and starts at column `cols_begin` as well (ParamSpec::cols_begin).
struct SliceMap {
  std::int64_t local_cols = 1, global_cols = 1, stored_rows = 0, split_begin = 0, cols_begin = 0;
  int split_dim = -1;

  SliceMap(const std::vector<std::int64_t>& local, int split, std::int64_t begin,
           const std::vector<std::int64_t>& stored, std::int64_t first_col = 0)
      : split_begin(begin), cols_begin(first_col), split_dim(split) {
    KINTSUGI_ASSERT(local.size() == stored.size() && !stored.empty() && stored.size() <= 2);
    if (local.size() == 2) {
      local_cols = local[1];
      global_cols = stored[1];
    }
    stored_rows = stored[0];
  }
  // A parameter's own slice.
  explicit SliceMap(const ParamEntry& e)
      : SliceMap(dims_of(e.local_shape), e.spec.split_dim, e.spec.split_begin,
                 stored_shape(e.spec), e.spec.cols_extent > 0 ? e.spec.cols_begin : 0) {}

  std::int64_t operator()(std::int64_t k) const {
    std::int64_t r = k / local_cols, c = k % local_cols;
    if (split_dim == 0) r += split_begin;
    if (split_dim == 1) c += split_begin;
    c += cols_begin;
    if (r >= stored_rows) return -1;
    return r * global_cols + c;
  }
};

}  // namespace kintsugi
