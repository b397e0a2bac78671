#include "kintsugi/model/param_store.hpp"

#include <algorithm>
#include <vector>

#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/rng.hpp"

namespace kintsugi {

namespace {
// Parameters start on 64-byte boundaries so kernels see aligned rows.
constexpr std::int64_t kAlignElements = 16;

std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }
}  // namespace

int ParamStore::add(ParamSpec spec) {
  KINTSUGI_ASSERT(param_base_.empty());  // registration is over once units are bound
  ParamEntry e;
  e.local_shape = spec.global_shape;
  if (spec.cols_extent > 0) {
    KINTSUGI_ASSERT(spec.split_dim == 0 && spec.global_shape.rank == 2);
    e.local_shape.dims[1] = spec.cols_extent;
  }
  if (spec.split_dim >= 0) {
    e.local_shape.dims[spec.split_dim] = spec.split_extent;
  } else {
    spec.split_begin = 0;
    spec.split_extent = 0;
  }
  e.spec = std::move(spec);
  e.offset = total_;
  e.unit = static_cast<int>(units_.size());
  total_ += round_up(e.local_shape.numel(), kAlignElements);
  entries_.push_back(std::move(e));
  written_.push_back(0);
  return static_cast<int>(entries_.size()) - 1;
}

void ParamStore::end_unit(const std::string& name) {
  const int first = open_unit_first_, end = size();
  if (first == end) return;  // nothing registered since the last unit
  ParamUnit u{name, first, end, entries_[first].offset, round_up(total_, unit_multiple_)};
  total_ = u.end;
  units_.push_back(u);
  open_unit_first_ = end;
}

int ParamStore::find(const std::string& name) const {
  for (int i = 0; i < size(); ++i)
    if (entries_[i].spec.name == name) return i;
  return -1;
}

void ParamStore::set_storage(DType param, DType grad, Device device) {
  KINTSUGI_ASSERT(open_unit_first_ == size());  // every parameter belongs to a unit
  param_dtype_ = param;
  grad_dtype_ = grad;
  device_ = device;
  param_base_.assign(units_.size(), nullptr);
  grad_base_.assign(units_.size(), nullptr);
}

void ParamStore::bind_params(int unit, void* base) { param_base_[unit] = base; }
void ParamStore::bind_grads(int unit, void* base) { grad_base_[unit] = base; }

Tensor ParamStore::param(int i) const {
  const auto& e = entries_[i];
  auto* base = static_cast<std::byte*>(param_base_[e.unit]);
  KINTSUGI_ASSERT(base != nullptr);  // a sharded unit must be gathered before use
  return Tensor{base + (e.offset - units_[e.unit].begin) * size_of(param_dtype_), param_dtype_,
                e.local_shape, device_};
}

Tensor ParamStore::grad(int i) const {
  const auto& e = entries_[i];
  auto* base = static_cast<std::byte*>(grad_base_[e.unit]);
  KINTSUGI_ASSERT(base != nullptr);  // a sharded unit's gradient is staged while in use
  return Tensor{base + (e.offset - units_[e.unit].begin) * size_of(grad_dtype_), grad_dtype_,
                e.local_shape, device_};
}

void ParamStore::allocate_full(Backend& backend, DType param_dtype, DType grad_dtype) {
  set_storage(param_dtype, grad_dtype, backend.device());
  params_ = backend.allocate(MemoryKind::parameters, total_ * size_of(param_dtype));
  grads_ = backend.allocate(MemoryKind::gradients, total_ * size_of(grad_dtype));
  for (int u = 0; u < units(); ++u) {
    bind_params(u, params_.data() + units_[u].begin * size_of(param_dtype));
    bind_grads(u, grads_.data() + units_[u].begin * size_of(grad_dtype));
  }
}

Tensor ParamStore::params() const {
  KINTSUGI_ASSERT(full());
  return params_.view(param_dtype_, Shape{total_});
}
Tensor ParamStore::grads() const {
  KINTSUGI_ASSERT(full());
  return grads_.view(grad_dtype_, Shape{total_});
}

namespace {

// Element `local` of parameter e as the serial run initializes it (element g of the global
// tensor is init_std x normal(seed, hash(name), g); padding rows are zero).
struct Initializer {
  const ParamEntry& e;
  std::uint64_t seed;

  // Fills local elements [from, to) of the parameter into out.
  void fill(std::int64_t from, std::int64_t to, float* out) const {
    const ParamSpec& s = e.spec;
    if (s.init != ParamInit::normal) {
      std::fill(out, out + (to - from), s.init == ParamInit::ones ? 1.0f : 0.0f);
      return;
    }
    // Each local row (last dimension) is one contiguous run of the global tensor, also when the
    // last dimension is the split one: walk runs, drawing Box-Muller pairs.
    const Shape& L = e.local_shape;
    const Shape& G = s.global_shape;
    const int last = L.rank - 1;
    const std::int64_t len = L[last];
    const std::uint64_t stream = stream_of(s.name);
    const std::int64_t first_row = from / len, end_row = (to + len - 1) / len;
#pragma omp parallel for schedule(static)
    for (std::int64_t r = first_row; r < end_row; ++r) {
      std::int64_t coords[4] = {0, 0, 0, 0}, rest = r;
      for (int d = last - 1; d >= 0; --d) {
        coords[d] = rest % L[d];
        rest /= L[d];
      }
      if (s.split_dim >= 0 && s.split_dim < last) coords[s.split_dim] += s.split_begin;
      std::int64_t global_row = 0;
      for (int d = 0; d < last; ++d) global_row = global_row * G[d] + coords[d];
      const bool padding = s.valid_rows >= 0 && last > 0 && coords[0] >= s.valid_rows;
      const std::int64_t g0 = global_row * G[last] + (s.split_dim == last ? s.split_begin : 0) +
                              (s.cols_extent > 0 ? s.cols_begin : 0);
      for (std::int64_t k = std::max<std::int64_t>(0, from - r * len);
           k < std::min(len, to - r * len); ++k) {
        const std::int64_t g = g0 + k;
        out[r * len + k - from] =
            padding ? 0.0f
                    : static_cast<float>(s.init_std * normal_pair_at(seed, stream, g / 2)[g % 2]);
      }
    }
  }
};

}  // namespace

void ParamStore::initial_values(std::uint64_t seed, std::int64_t begin, std::int64_t end,
                                float* out) const {
  std::fill(out, out + (end - begin), 0.0f);
  for (const ParamEntry& e : entries_) {
    const std::int64_t n = e.local_shape.numel();
    const std::int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + n);
    if (lo < hi) Initializer{e, seed}.fill(lo - e.offset, hi - e.offset, out + (lo - begin));
  }
}

void ParamStore::initialize(std::uint64_t seed) {
  KINTSUGI_ASSERT(full());
  std::vector<float> values(static_cast<std::size_t>(total_));
  initial_values(seed, 0, total_, values.data());
  write_values(values.data(), params());  // f64 (gradient checks) keeps the f32 draws exactly
}

void ParamStore::mark_replicated_over_depth(int z_rank) {
  KINTSUGI_ASSERT(param_base_.empty());
  for (ParamEntry& e : entries_) {
    if (e.spec.cols_extent > 0) continue;  // a grid weight: sharded over z
    e.spec.depth_partial_grad = true;
    e.spec.duplicate = e.spec.duplicate || z_rank != 0;
  }
}

void ParamStore::begin_step() { std::fill(written_.begin(), written_.end(), 0); }

void ParamStore::reset_written(int unit) {
  for (int i = units_[unit].first_param; i < units_[unit].end_param; ++i) written_[i] = 0;
}

bool ParamStore::accumulate_grad(int i) {
  bool accumulate = written_[i] != 0;
  written_[i] = 1;
  return accumulate;
}

void ParamStore::zero_unwritten_grads(Backend& backend) {
  for (int i = 0; i < size(); ++i)
    if (!written_[i]) {
      backend.zero(grad(i));
      written_[i] = 1;
    }
}

}  // namespace kintsugi
