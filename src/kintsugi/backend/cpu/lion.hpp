#pragma once
// The Lion update on the CPU (Backend::lion_step): all f32 or all f64, or mixed precision (f32
// master weights and moment, a gradient of any type, a working copy rounded from the result).
#include <cstdint>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/staging.hpp"

namespace kintsugi::cpu {

template <class T>
void lion_step(T* param, const T* grad, T* m, std::int64_t n, const LionHyper& h);

namespace mixed {
void lion_step(float* param, AnyPtr grad, float* m, const AnyPtr* working_copy, std::int64_t n,
               const LionHyper& h);
}  // namespace mixed

}  // namespace kintsugi::cpu
