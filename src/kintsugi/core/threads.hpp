#pragma once
// One thread count for the whole process: our OpenMP kernels and OpenBLAS (its OpenMP build)
// share the same OpenMP pool, so setting it here is enough to never oversubscribe the cores.
namespace kintsugi {

// 0 means OMP_NUM_THREADS when set, else all cores of this machine.
void set_compute_threads(int threads);
int compute_threads();

}  // namespace kintsugi
