#pragma once
// Carves many tensors out of one allocation. A layout is a function that asks for tensors in
// order; it runs once to measure, once more to hand out views into the allocated buffer:
//
//   Buffer b = carve(backend, MemoryKind::activations, [&](Carver& c) {
//     saved.x = c.take(dtype, {rows, d});
//     saved.mean = c.take(dtype, {rows});
//   });
#include <cstddef>
#include <utility>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

class Carver {
 public:
  explicit Carver(std::byte* base = nullptr, Device device = Device::cpu)
      : base_(base), device_(device) {}
  Tensor take(DType dtype, Shape shape) {
    Tensor t{base_ ? base_ + used_ : nullptr, dtype, shape, device_};
    used_ += (t.bytes() + 63) / 64 * 64;
    return t;
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  Device device_;
  std::size_t used_ = 0;
};

template <class Layout>
Buffer carve(Backend& backend, MemoryKind kind, Layout&& layout) {
  Carver measure;
  layout(measure);
  Buffer buffer = backend.allocate(kind, measure.used());
  Carver real(buffer.data(), buffer.device());
  layout(real);
  return buffer;
}

}  // namespace kintsugi
