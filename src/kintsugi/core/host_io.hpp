#pragma once
// The one way host code reads or writes memory that may live on a device: initialization,
// checkpoints, export and import, generation's logits, the scalars a step reads (loss sum, sum
// of squares). On the CPU these are plain copies; on a device they go through the device's
// allocator (core/allocator.hpp), which orders them after the ops enqueued before.
#include <cstdint>
#include <vector>

#include "kintsugi/core/tensor.hpp"

namespace kintsugi {

// Raw bytes: all of the tensor's bytes().
void copy_to_host(const Tensor& src, void* host);
void copy_from_host(const void* host, const Tensor& dst);

// Values of a float tensor (f32, f64, bf16, f16), converted to or from float with round to
// nearest even (the same rounding as the backends' convert op).
void read_values(const Tensor& src, float* out);
std::vector<float> read_values(const Tensor& src);
void write_values(const float* values, const Tensor& dst);
// Element 0 of an f64 or f32 tensor, e.g. a step's loss sum.
double read_scalar(const Tensor& src);
void write_scalar(double value, const Tensor& dst);

}  // namespace kintsugi
