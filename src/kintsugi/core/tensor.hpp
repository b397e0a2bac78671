#pragma once
// A Tensor is a non-owning view: pointer, element type, a row-major shape of up to 4 dims and the
// device the memory lives on. Storage belongs to a Buffer (memory.hpp), a flat
// parameter/gradient buffer, or (host tensors only) the caller. Code outside the backends never
// dereferences a tensor that may live on a device: it goes through core/host_io.hpp.
#include <array>
#include <cstdint>
#include <initializer_list>

#include "kintsugi/core/device.hpp"
#include "kintsugi/core/dtype.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

struct Shape {
  std::array<std::int64_t, 4> dims{0, 0, 0, 0};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d) {
    KINTSUGI_ASSERT(d.size() <= 4);
    for (auto v : d) dims[rank++] = v;
  }
  std::int64_t operator[](int i) const { return dims[i]; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return rank == 0 ? 0 : n;
  }
  bool operator==(const Shape& o) const { return rank == o.rank && dims == o.dims; }
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device = Device::cpu;

  std::int64_t numel() const { return shape.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * size_of(dtype); }
  bool empty() const { return data == nullptr; }

  // Typed host access (backends' kernels, host tensors).
  template <class T> T* as() const {
    KINTSUGI_ASSERT(dtype_of<T>() == dtype);
    return static_cast<T*>(data);
  }
  // The same memory seen with another shape of equal size.
  Tensor reshaped(Shape s) const {
    KINTSUGI_ASSERT(s.numel() == numel());
    return Tensor{data, dtype, s, device};
  }
  // Rows [begin, begin+count) of the leading dimension.
  Tensor rows(std::int64_t begin, std::int64_t count) const {
    std::int64_t row = numel() / shape[0];
    Shape s = shape;
    s.dims[0] = count;
    return Tensor{static_cast<char*>(data) + begin * row * static_cast<std::int64_t>(size_of(dtype)),
                  dtype, s, device};
  }
};

}  // namespace kintsugi
