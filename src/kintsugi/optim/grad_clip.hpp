#pragma once
// Clipping by global gradient norm: the factor that scales the gradient to at most max_norm.
namespace kintsugi {

// 1 when max_norm <= 0 (clipping off) or the norm is within bounds.
inline double clip_factor(double grad_norm, double max_norm) {
  if (max_norm <= 0 || grad_norm <= max_norm) return 1.0;
  return max_norm / (grad_norm + 1e-6);
}

}  // namespace kintsugi
