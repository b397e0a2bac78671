#include "kintsugi/comm/collective_timing.hpp"

#include <algorithm>
#include <chrono>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CollectiveTiming time_collective(Communicator& group, CommOp op, std::int64_t bytes, int repeats) {
  const int n = group.size();
  const std::int64_t elements = bytes / 4 / n * n;  // whole chunks per rank
  std::vector<float> buffer(static_cast<std::size_t>(elements), 1.0f), out(buffer.size());
  const Tensor whole{buffer.data(), DType::f32, Shape{elements}};
  const Tensor part{buffer.data(), DType::f32, Shape{elements / n}};
  const Tensor gathered{out.data(), DType::f32, Shape{elements}};
  auto run = [&] {
    switch (op) {
      case CommOp::all_reduce: group.all_reduce(whole); break;
      case CommOp::reduce_scatter: group.reduce_scatter(whole, part); break;
      case CommOp::all_gather: group.all_gather(part, gathered); break;
      default: fail("bench comm times all_reduce, reduce_scatter and all_gather");
    }
  };
  run();  // warm-up (connections, buffers)
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    group.barrier();
    const double start = now_s();
    run();
    times.push_back(now_s() - start);
  }
  std::sort(times.begin(), times.end());
  // The slowest rank's median: a collective is done when the last rank is.
  const double median = group.host_all_reduce(times[times.size() / 2], ReduceOp::max);
  const double b = static_cast<double>(elements) * 4;
  const double factor = op == CommOp::all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
  return {op, static_cast<std::int64_t>(b), median * 1e6, b * factor / median / 1e9};
}

std::vector<CollectiveTiming> time_collectives(Communicator& group) {
  std::vector<CollectiveTiming> out;
  const std::int64_t KiB = 1024, MiB = 1024 * KiB;
  for (std::int64_t b : {4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB})
    out.push_back(time_collective(group, CommOp::all_reduce, b, b >= 16 * MiB ? 10 : 50));
  for (CommOp op : {CommOp::reduce_scatter, CommOp::all_gather})
    for (std::int64_t b : {4 * MiB, 64 * MiB})
      out.push_back(time_collective(group, op, b, b >= 16 * MiB ? 10 : 50));
  return out;
}

}  // namespace kintsugi
