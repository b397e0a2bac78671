#pragma once
// Timing work on a backend's device, for the measurements behind the planner's `local`
// clusters (GEMM rates, the attention rate, the memory bandwidth).
//
// Backend ops are asynchronous (a GPU backend enqueues them and returns), so timing one call
// followed by synchronize() would also time the launch and the wait for the device to go idle:
// tens of microseconds, a large share of a GEMM that takes a hundred. Calls are therefore
// batched, enough of them that one batch runs for at least `min_batch_seconds`, and a call's
// time is the best batch's divided by its calls. The CPU backend finishes each op before it
// returns: one large call already fills a batch, so it is timed alone, as before batching.
#include <functional>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

// Seconds of one `enqueue()` (ops on `backend`): one untimed warm-up call (page faults, thread
// start-up, clock ramp, library initialization, algorithm choice), then the best of `repeats`
// batches.
double best_seconds_per_call(Backend& backend, const std::function<void()>& enqueue, int repeats,
                             double min_batch_seconds = 0.02);

}  // namespace kintsugi
