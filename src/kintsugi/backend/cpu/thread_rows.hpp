#pragma once
// The loop of the mixed-precision row kernels: rows in parallel, each thread with its own f32
// scratch from a ThreadWorkspace to stage its rows in. Rows are split as by
// `#pragma omp parallel for schedule(static)`, and each row's arithmetic is the row body's
// alone, so results do not depend on the thread count.
#include <omp.h>

#include <cstdint>

#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu {

// Reserves `floats` f32 per thread; each thread calls make_row(its area) once, to stage what
// all of its rows read (a norm's weights, say), and then the returned row(r) for its rows.
template <class MakeRow>
void rows_with_thread_area(ThreadWorkspace& ws, std::int64_t floats, std::int64_t rows,
                           MakeRow&& make_row) {
  const std::size_t stride = ws.reserve(floats * sizeof(float));
#pragma omp parallel
  {
    auto row = make_row(reinterpret_cast<float*>(ws.base() + stride * omp_get_thread_num()));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) row(r);
  }
}

}  // namespace kintsugi::cpu
