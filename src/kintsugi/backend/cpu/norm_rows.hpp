#pragma once
// The dx pass of the mixed-precision norms' backward (layernorm.cpp, rmsnorm.cpp), the same for
// both but for the row body: each thread stages the weights in f32 once, then per row dy, x and
// dx, runs the f32 row body on them and rounds dx once.
#include <cstdint>

#include "kintsugi/backend/cpu/staging.hpp"
#include "kintsugi/backend/cpu/thread_rows.hpp"

namespace kintsugi::cpu::mixed {

// row_body(r, dyr, xr, w32, dxr) adds row r's input gradient to dxr, all in f32.
template <class RowBody>
void norm_dx_rows(AnyPtr dy, AnyPtr x, AnyPtr w, AnyPtr dx, std::int64_t rows,
                  std::int64_t cols, ThreadWorkspace& ws, RowBody&& row_body) {
  rows_with_thread_area(ws, 4 * cols, rows, [&](float* area) {
    const float* w32 = read_f32(w, cols, area);
    return [&, area, w32](std::int64_t r) {
      const float* dyr = read_f32(dy.at(r * cols), cols, area + cols);
      const float* xr = read_f32(x.at(r * cols), cols, area + 2 * cols);
      float* dxr = out_f32(dx.at(r * cols), cols, area + 3 * cols, true);
      row_body(r, dyr, xr, w32, dxr);
      write_back(dx.at(r * cols), cols, dxr);
    };
  });
}

}  // namespace kintsugi::cpu::mixed
