// Every collective of the communicator under mpirun, on an odd number of ranks (uneven ring
// chunks): results against their definition and byte counters against the ring formulas.
// Exits 1 with a message on the first mismatch.
#include <fmt/format.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"
#include "kintsugi/comm/topology.hpp"

using namespace kintsugi;

namespace {
int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    fmt::print(stderr, "rank {}: FAILED: {}\n", rank, what);
    ++failures;
  }
}
Tensor view(std::vector<float>& v) { return Tensor{v.data(), DType::f32, Shape{static_cast<std::int64_t>(v.size())}}; }
}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  {
    auto world = make_world_communicator();
    const int r = world->rank(), n = world->size();

    // all-reduce (sum and max) of 1001 elements: chunks of unequal length
    const int N = 1001;
    std::vector<float> x(N);
    for (int i = 0; i < N; ++i) x[i] = float(r + 1) * (i % 7);
    world->all_reduce(view(x));
    const float ranks_sum = float(n * (n + 1) / 2);
    bool ok = true;
    for (int i = 0; i < N; ++i) ok &= x[i] == ranks_sum * (i % 7);
    expect(ok, "all_reduce sum", r);
    // Rank r sends every chunk but its own (reduce-scatter), then every chunk but r + 1.
    auto chunk = [&](int i) { return N * (i + 1) / n - N * i / n; };
    const std::uint64_t sent = 4ull * (2 * N - chunk(r) - chunk((r + 1) % n));
    expect(world->bytes(CommOp::all_reduce).sent == sent,
           fmt::format("all_reduce bytes {} != {}", world->bytes(CommOp::all_reduce).sent, sent), r);

    std::vector<float> m(5, float(r));
    world->all_reduce(view(m), ReduceOp::max);
    expect(m[4] == float(n - 1), "all_reduce max", r);

    // reduce-scatter: chunk c of the result is the sum over ranks of their chunk c
    std::vector<float> in(3 * n), out(3);
    for (int i = 0; i < 3 * n; ++i) in[i] = float(i + r);
    world->reduce_scatter(view(in), view(out));
    for (int j = 0; j < 3; ++j)
      expect(out[j] == float(n * (3 * r + j)) + float(n * (n - 1) / 2), "reduce_scatter", r);

    // all-gather
    std::vector<float> mine(2, float(10 * r)), all(2 * n);
    world->all_gather(view(mine), view(all));
    for (int k = 0; k < n; ++k) expect(all[2 * k] == float(10 * k), "all_gather", r);
    expect(world->bytes(CommOp::all_gather).sent == 4ull * 2 * (n - 1), "all_gather bytes", r);

    // broadcast from the last rank
    std::vector<float> b(4, r == n - 1 ? 3.5f : 0.0f);
    world->broadcast(view(b), n - 1);
    expect(b[3] == 3.5f, "broadcast", r);

    // point-to-point around the ring, posted receive first: must not deadlock
    std::vector<float> from_left(1), to_right(1, float(r));
    auto recv = world->recv_async(view(from_left), (r - 1 + n) % n);
    auto send = world->send_async(view(to_right), (r + 1) % n);
    recv.wait();
    send.wait();
    expect(from_left[0] == float((r - 1 + n) % n), "send/recv", r);

    // sub-groups from a topology: tp groups of size 1 when n is odd
    const Topology topo(world, {.tp = 1, .dp = n, .pp = 1});
    std::vector<float> one(1, 1.0f);
    topo.dp().all_reduce(view(one));
    expect(one[0] == float(n), "dp group all_reduce", r);
    world->barrier();
    if (r == 0 && failures == 0) fmt::print("collectives ok on {} ranks\n", n);
  }
  return failures ? 1 : 0;
}
