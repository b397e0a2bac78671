#pragma once
// Times the data-plane collectives of a communicator (`kintsugi bench comm`): every rank runs
// the same calls; the result is valid on every rank. Bus bandwidth follows the usual convention
// (the bytes a bandwidth-optimal algorithm moves per rank over the time): all-reduce
// 2(n-1)/n B / t, reduce-scatter and all-gather (n-1)/n B / t, B the whole buffer.
#include <cstdint>
#include <vector>

#include "kintsugi/comm/communicator.hpp"

namespace kintsugi {

struct CollectiveTiming {
  CommOp op = CommOp::all_reduce;
  std::int64_t bytes = 0;   // the whole f32 buffer
  double median_us = 0;     // over the repetitions, slowest rank's view
  double bus_gbs = 0;
};

// The default sweep: all-reduce from 4 KiB to 64 MiB, reduce-scatter and all-gather of 4 and
// 64 MiB, f32.
std::vector<CollectiveTiming> time_collectives(Communicator& group);
CollectiveTiming time_collective(Communicator& group, CommOp op, std::int64_t bytes, int repeats);

}  // namespace kintsugi
