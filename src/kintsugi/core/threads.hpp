#pragma once
// One thread count for the whole process: our OpenMP kernels and OpenBLAS (its OpenMP build)
// share the same OpenMP pool, so setting it here is enough to never oversubscribe the cores.
namespace kintsugi {

// 0 means OMP_NUM_THREADS when set, else all cores of this machine.
void set_compute_threads(int threads);
int compute_threads();

// How long an idle OpenMP thread spins before it sleeps is fixed by libgomp when the program
// loads, before main (GOMP_SPINCOUNT; OMP_WAIT_POLICY). Its default suits a machine of our own
// and costs much on a shared one: a spinning thread holds the core a descheduled peer needs.
// Unless the user chose (either variable set), this runs the program again, once, with a
// bounded spin count (docs/benchmarks.md: what it costs and saves); it returns when there is
// nothing to do or the re-run is impossible. Call first thing in main, before any thread.
void bound_openmp_spinning(char** argv);

}  // namespace kintsugi
