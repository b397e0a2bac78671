#include "kintsugi/model/param_store.hpp"

#include "kintsugi/core/rng.hpp"

namespace kintsugi {

namespace {
// Parameters start on 64-byte boundaries so kernels see aligned rows.
constexpr std::int64_t kAlignElements = 16;
}  // namespace

int ParamStore::add(ParamSpec spec) {
  KINTSUGI_ASSERT(params_.data() == nullptr);
  ParamEntry e;
  e.local_shape = spec.global_shape;
  if (spec.split_dim >= 0) e.local_shape.dims[spec.split_dim] = spec.split_extent;
  else {
    spec.split_begin = 0;
    spec.split_extent = 0;
  }
  e.spec = std::move(spec);
  e.offset = total_;
  total_ += (e.local_shape.numel() + kAlignElements - 1) / kAlignElements * kAlignElements;
  entries_.push_back(std::move(e));
  written_.push_back(0);
  return static_cast<int>(entries_.size()) - 1;
}

void ParamStore::allocate(Backend& backend, DType dtype) {
  backend_ = &backend;
  dtype_ = dtype;
  params_ = backend.allocate(MemoryKind::parameters, total_ * size_of(dtype));
  grads_ = backend.allocate(MemoryKind::gradients, total_ * size_of(dtype));
}

Tensor ParamStore::param(int i) const {
  const auto& e = entries_[i];
  return params_.view(dtype_, e.local_shape, e.offset * size_of(dtype_));
}

Tensor ParamStore::grad(int i) const {
  const auto& e = entries_[i];
  return grads_.view(dtype_, e.local_shape, e.offset * size_of(dtype_));
}

Tensor ParamStore::params() const { return params_.view(dtype_, Shape{total_}); }
Tensor ParamStore::grads() const { return grads_.view(dtype_, Shape{total_}); }

int ParamStore::find(const std::string& name) const {
  for (int i = 0; i < size(); ++i)
    if (entries_[i].spec.name == name) return i;
  return -1;
}

namespace {

template <class T>
void fill(const ParamEntry& e, T* out, std::uint64_t seed) {
  const ParamSpec& s = e.spec;
  const std::int64_t n = e.local_shape.numel();
  if (s.init != ParamInit::normal) {
    std::fill(out, out + n, s.init == ParamInit::ones ? T(1) : T(0));
    return;
  }
  // Each local row (last dimension) is one contiguous run of the global (serial) tensor, also
  // when the last dimension is the split one. Walk runs, drawing Box-Muller pairs.
  const Shape& L = e.local_shape;
  const Shape& G = s.global_shape;
  const int last = L.rank - 1;
  const std::int64_t len = L[last], rows = n / len;
  const std::uint64_t stream = stream_of(s.name);
  const double sd = s.init_std;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t coords[4] = {0, 0, 0, 0}, rest = r;
    for (int d = last - 1; d >= 0; --d) {
      coords[d] = rest % L[d];
      rest /= L[d];
    }
    if (s.split_dim >= 0 && s.split_dim < last) coords[s.split_dim] += s.split_begin;
    std::int64_t global_row = 0;
    for (int d = 0; d < last; ++d) global_row = global_row * G[d] + coords[d];
    T* o = out + r * len;
    const bool padding = s.valid_rows >= 0 && (last == 0 ? false : coords[0] >= s.valid_rows);
    if (padding) {
      std::fill(o, o + len, T(0));
      continue;
    }
    const std::int64_t g0 = global_row * G[last] + (s.split_dim == last ? s.split_begin : 0);
    std::int64_t k = 0;
    if (g0 % 2) o[k++] = static_cast<T>(sd * normal_pair_at(seed, stream, g0 / 2)[1]);
    for (; k + 1 < len; k += 2) {
      const auto pair = normal_pair_at(seed, stream, (g0 + k) / 2);
      o[k] = static_cast<T>(sd * pair[0]);
      o[k + 1] = static_cast<T>(sd * pair[1]);
    }
    if (k < len) o[k] = static_cast<T>(sd * normal_pair_at(seed, stream, (g0 + k) / 2)[0]);
  }
}

}  // namespace

void ParamStore::initialize(std::uint64_t seed) {
  for (const auto& e : entries_) {
    Tensor t = params_.view(dtype_, e.local_shape, e.offset * size_of(dtype_));
    switch (dtype_) {
      case DType::f32: fill(e, t.as<float>(), seed); break;
      case DType::f64: fill(e, t.as<double>(), seed); break;
      default: fail("parameters of type {} cannot be initialized yet", name_of(dtype_));
    }
  }
}

void ParamStore::begin_step() { std::fill(written_.begin(), written_.end(), 0); }

bool ParamStore::accumulate_grad(int i) {
  bool accumulate = written_[i] != 0;
  written_[i] = 1;
  return accumulate;
}

void ParamStore::zero_unwritten_grads() {
  for (int i = 0; i < size(); ++i)
    if (!written_[i]) {
      backend_->zero(grad(i));
      written_[i] = 1;
    }
}

}  // namespace kintsugi
