// Every operation of the communicator under mpirun, on an odd number of ranks (uneven chunks):
// results against their definition, byte counters against the bandwidth-optimal volumes, 16-bit
// sums reduced in f32, in-place forms, all-to-all in four types, transfers paired in posting
// order, bit-identical all-reduce results on every rank, the control plane, and device tensors
// staged through host memory (on a stand-in device the host cannot touch). Exits 1 after
// printing every mismatch.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/half.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/switches.hpp"
#include "support/guarded_device.hpp"

using namespace kintsugi;

namespace {
int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    fmt::print(stderr, "rank {}: FAILED: {}\n", rank, what);
    ++failures;
  }
}
template <class T>
Tensor view(std::vector<T>& v, DType dtype = dtype_of<T>()) {
  return Tensor{v.data(), dtype, Shape{static_cast<std::int64_t>(v.size())}};
}

void reductions_and_counters(Communicator& world) {
  const int r = world.rank(), n = world.size();
  // all-reduce (sum and max) of 1001 elements: chunks of unequal length
  const int N = 1001;
  std::vector<float> x(N);
  for (int i = 0; i < N; ++i) x[i] = float(r + 1) * (i % 7);
  world.all_reduce(view(x));
  const float ranks_sum = float(n * (n + 1) / 2);
  bool ok = true;
  for (int i = 0; i < N; ++i) ok &= x[i] == ranks_sum * (i % 7);
  expect(ok, "all_reduce sum", r);
  // Rank r sends every chunk but its own (reduce-scatter), then every chunk but r + 1.
  auto chunk = [&](int i) { return N * (i + 1) / n - N * i / n; };
  const std::uint64_t sent = 4ull * (2 * N - chunk(r) - chunk((r + 1) % n));
  expect(world.bytes(CommOp::all_reduce).sent == sent,
         fmt::format("all_reduce bytes {} != {}", world.bytes(CommOp::all_reduce).sent, sent), r);

  std::vector<float> m(5, float(r));
  world.all_reduce(view(m), ReduceOp::max);
  expect(m[4] == float(n - 1), "all_reduce max", r);
  std::vector<std::int32_t> k(3, r + 1);
  world.all_reduce(view(k));
  expect(k[2] == n * (n + 1) / 2, "all_reduce i32", r);

  // reduce-scatter: chunk c of the result is the sum over ranks of their chunk c
  std::vector<float> in(3 * n), out(3);
  for (int i = 0; i < 3 * n; ++i) in[i] = float(i + r);
  world.reduce_scatter(view(in), view(out));
  for (int j = 0; j < 3; ++j)
    expect(out[j] == float(n * (3 * r + j)) + float(n * (n - 1) / 2), "reduce_scatter", r);
  expect(world.bytes(CommOp::reduce_scatter).sent == 4ull * 3 * (n - 1), "reduce_scatter bytes", r);

  std::vector<float> mine(2, float(10 * r)), all(2 * n);
  world.all_gather(view(mine), view(all));
  for (int q = 0; q < n; ++q) expect(all[2 * q] == float(10 * q), "all_gather", r);
  expect(world.bytes(CommOp::all_gather).sent == 4ull * 2 * (n - 1), "all_gather bytes", r);

  // broadcast from the last rank: a chain, the root sends, the last rank only receives
  std::vector<float> b(4, r == n - 1 ? 3.5f : 0.0f);
  world.broadcast(view(b), n - 1);
  expect(b[3] == 3.5f, "broadcast", r);
  expect(world.bytes(CommOp::broadcast).sent == (r == n - 2 ? 0u : 16u) &&
             world.bytes(CommOp::broadcast).received == (r == n - 1 ? 0u : 16u),
         "broadcast bytes", r);
}

// bf16 and f16 are added in f32 (a plain 16-bit integer sum would be garbage); the values are
// exact in 16 bits in any order of addition.
void sixteen_bit(Communicator& world) {
  const int r = world.rank(), n = world.size();
  std::vector<std::uint16_t> b(7, float_to_bf16(1.5f * float(r + 1)));
  std::vector<std::uint16_t> h(7, float_to_f16(0.25f * float(r)));
  world.all_reduce(view(b, DType::bf16));
  world.all_reduce(view(h, DType::f16));
  expect(bf16_to_float(b[6]) == 1.5f * float(n * (n + 1) / 2), "all_reduce bf16", r);
  expect(f16_to_float(h[6]) == 0.25f * float(n * (n - 1) / 2), "all_reduce f16", r);
  // reduce-scatter of 16-bit values: chunk c of rank q holds 0.5 (q + 1) (c + 1)
  std::vector<std::uint16_t> bs(5 * n), hs(5 * n), bo(5), ho(5);
  for (int i = 0; i < 5 * n; ++i) {
    bs[i] = float_to_bf16(0.5f * float((r + 1) * (i / 5 + 1)));
    hs[i] = float_to_f16(0.5f * float((r + 1) * (i / 5 + 1)));
  }
  world.reduce_scatter(view(bs, DType::bf16), view(bo, DType::bf16));
  world.reduce_scatter(view(hs, DType::f16), view(ho, DType::f16));
  const float want = 0.5f * float(n * (n + 1) / 2) * float(r + 1);
  expect(bf16_to_float(bo[4]) == want, "reduce_scatter bf16", r);
  expect(f16_to_float(ho[4]) == want, "reduce_scatter f16", r);
  std::vector<std::uint16_t> hm(3, float_to_f16(-float(r)));
  world.all_reduce(view(hm, DType::f16), ReduceOp::max);
  expect(f16_to_float(hm[0]) == 0.0f, "all_reduce f16 max", r);
}

// The forms ZeRO uses: the reduced chunk lands on the rank's own chunk of the input, and the
// gathered input is already the rank's chunk of the output.
void in_place(Communicator& world) {
  const int r = world.rank(), n = world.size();
  std::vector<float> g(4 * n);
  for (int i = 0; i < 4 * n; ++i) g[i] = float(i);
  const Tensor whole = view(g), own{g.data() + 4 * r, DType::f32, Shape{4}};
  world.reduce_scatter(whole, own);
  for (int j = 0; j < 4; ++j)
    expect(g[4 * r + j] == float(n * (4 * r + j)), "reduce_scatter in place", r);
  std::vector<float> p(3 * n, -1.0f);
  for (int j = 0; j < 3; ++j) p[3 * r + j] = float(100 * r + j);
  world.all_gather(Tensor{p.data() + 3 * r, DType::f32, Shape{3}}, view(p));
  for (int q = 0; q < n; ++q) expect(p[3 * q + 2] == float(100 * q + 2), "all_gather in place", r);
}

// all-to-all: block j of rank q's input arrives as block q of rank j's output. Each element's
// value names its source rank, block and position (distinct and exact in every type up to 8
// ranks), in f32, bf16, i32 and u8; the byte counters count every block but the rank's own,
// both ways; a group of one rank copies its input; an output overlapping the input is refused.
void all_to_all(Communicator& world) {
  const int r = world.rank(), n = world.size();
  const int per = 4;  // elements per block
  auto value = [&](int source, int block, int i) { return (source * n + block) * per + i; };
  world.reset_counters();
  std::uint64_t moved = 0, calls = 0;
  auto check = [&]<class T>(DType dtype, auto encode) {
    std::vector<T> in(static_cast<std::size_t>(per * n)), out(in.size(), encode(255));
    auto at = [&](int block, int i) { return static_cast<std::size_t>(block * per + i); };
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < per; ++i) in[at(j, i)] = encode(value(r, j, i));
    world.all_to_all(view(in, dtype), view(out, dtype));
    bool ok = true;
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < per; ++i) ok &= out[at(q, i)] == encode(value(q, r, i));
    expect(ok, fmt::format("all_to_all {}", name_of(dtype)), r);
    moved += sizeof(T) * per * static_cast<std::uint64_t>(n - 1);
    ++calls;
    const CommBytes b = world.bytes(CommOp::all_to_all);
    expect(b.sent == moved && b.received == moved && b.calls == calls,
           fmt::format("all_to_all {} counters: sent {}, received {}, calls {}; expected {}, {}",
                       name_of(dtype), b.sent, b.received, b.calls, moved, calls),
           r);
  };
  check.template operator()<float>(DType::f32, [](int v) { return float(v); });
  check.template operator()<std::uint16_t>(DType::bf16,
                                           [](int v) { return float_to_bf16(float(v)); });
  check.template operator()<std::int32_t>(DType::i32, [](int v) { return std::int32_t(v); });
  check.template operator()<std::uint8_t>(DType::u8, [](int v) { return std::uint8_t(v); });

  std::vector<float> same(static_cast<std::size_t>(n + 1));
  bool refused = false;
  try {
    world.all_to_all(Tensor{same.data(), DType::f32, Shape{n}},
                     Tensor{same.data() + 1, DType::f32, Shape{n}});
  } catch (const std::exception&) {
    refused = true;
  }
  expect(refused, "all_to_all refuses an output that overlaps the input", r);
  expect(world.bytes(CommOp::all_to_all).calls == calls, "a refused all_to_all is not counted", r);

  // A group of one rank: its one block is its own.
  const auto self = world.split(r, 0, "self");
  std::vector<float> mine = {1.5f, -2.0f, float(r)}, got(3, 0.0f);
  self->all_to_all(view(mine), view(got));
  expect(got == mine, "all_to_all on a group of one rank", r);
  expect(self->bytes(CommOp::all_to_all).sent == 0 && self->bytes(CommOp::all_to_all).calls == 1,
         "all_to_all on one rank moves nothing", r);
}

// All-to-all of uneven blocks (expert parallelism's rows): rank s sends rank j (s + 2 j) % 3
// elements (some blocks empty), each naming its source, destination and position; the
// counters count the blocks of the other ranks, each way, not the rank's own block.
void all_to_all_v(Communicator& world) {
  const int r = world.rank(), n = world.size();
  auto count = [](int source, int dest) { return static_cast<std::int64_t>((source + 2 * dest) % 3); };
  auto value = [&](int source, int dest, std::int64_t i) {
    return float(1000 * source + 10 * dest) + float(i);
  };
  std::vector<std::int64_t> send, recv;
  std::vector<float> in;
  std::int64_t received = 0, sent_others = 0, received_others = 0;
  for (int j = 0; j < n; ++j) {
    send.push_back(count(r, j));
    recv.push_back(count(j, r));
    for (std::int64_t i = 0; i < count(r, j); ++i) in.push_back(value(r, j, i));
    received += count(j, r);
    if (j != r) {
      sent_others += count(r, j);
      received_others += count(j, r);
    }
  }
  std::vector<float> out(static_cast<std::size_t>(received) + 1, -1.0f);
  in.push_back(0.0f);  // never empty
  world.reset_counters();
  world.all_to_all_v(view(in), send, view(out), recv);
  bool ok = true;
  std::size_t at = 0;
  for (int q = 0; q < n; ++q)
    for (std::int64_t i = 0; i < count(q, r); ++i) ok &= out[at++] == value(q, r, i);
  expect(ok && out.back() == -1.0f, "all_to_all_v blocks in rank order", r);
  const CommBytes b = world.bytes(CommOp::all_to_all);
  expect(b.sent == 4 * static_cast<std::uint64_t>(sent_others) &&
             b.received == 4 * static_cast<std::uint64_t>(received_others) && b.calls == 1,
         fmt::format("all_to_all_v counters: sent {}, received {}; expected {}, {}", b.sent,
                     b.received, 4 * sent_others, 4 * received_others),
         r);
}

// No tags: the k-th message a rank sends another is the k-th receive the other posts from it.
void transfers_in_order(Communicator& world) {
  const int r = world.rank(), n = world.size();
  std::vector<std::vector<float>> out(3), in(3);
  std::vector<CommHandle> handles;
  for (int k = 0; k < 3; ++k) {
    in[k].assign(64, 0.0f);
    handles.push_back(world.recv_async(view(in[k]), (r - 1 + n) % n));
  }
  for (int k = 0; k < 3; ++k) {
    out[k].assign(64, float(10 * r + k));
    handles.push_back(world.send_async(view(out[k]), (r + 1) % n));
  }
  for (auto& h : handles) h.wait();
  for (int k = 0; k < 3; ++k)
    expect(in[k][63] == float(10 * ((r - 1 + n) % n) + k), fmt::format("transfer {} in order", k),
           r);
}

// A data-parallel replica must not drift: every rank gets the same bits, whatever algorithm the
// library picks for the size.
void identical_results(Communicator& world) {
  const int r = world.rank();
  std::mt19937 rng(1234 + r);
  std::normal_distribution<float> normal;
  for (std::int64_t size : {7, 4099, 1 << 20}) {
    std::vector<float> x(static_cast<std::size_t>(size));
    for (float& v : x) v = normal(rng);
    world.all_reduce(view(x));
    std::uint64_t hash = 1469598103934665603ull;
    for (float v : x) {
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      hash = (hash ^ bits) * 1099511628211ull;
    }
    const double h = static_cast<double>(hash >> 12);  // exact in a double
    const bool same = world.host_all_reduce(h, ReduceOp::max) == h &&
                      -world.host_all_reduce(-h, ReduceOp::max) == h;
    expect(same, fmt::format("all_reduce of {} floats differs between ranks", size), r);
  }
}

// kintsugi's reduce-scatter adds the ranks' chunks in rank order (chunk_sum.hpp): every rank can
// recompute its chunk's sum from the other ranks' seeds and must get the same bits. The library's
// own call (KINTSUGI_MPI_REDUCE_SCATTER=library) promises no order: only the values are checked.
void reduce_scatter_in_rank_order(Communicator& world) {
  const int r = world.rank(), n = world.size();
  const bool rank_order =
      Switches::process().text(Switch::mpi_reduce_scatter) != "library";
  const int chunk = 4099;
  auto values = [&](int q) {
    std::mt19937 rng(99 + q);
    std::normal_distribution<float> normal;
    std::vector<float> v(static_cast<std::size_t>(chunk) * n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  std::vector<float> in = values(r), out(static_cast<std::size_t>(chunk));
  world.reduce_scatter(view(in), view(out));
  bool exact = true, close = true;
  std::vector<std::vector<float>> all;
  for (int q = 0; q < n; ++q) all.push_back(values(q));
  for (int i = 0; i < chunk; ++i) {
    float sum = 0.0f;
    for (int q = 0; q < n; ++q) sum = q == 0 ? all[q][r * chunk + i] : sum + all[q][r * chunk + i];
    exact &= out[static_cast<std::size_t>(i)] == sum;
    close &= std::abs(out[static_cast<std::size_t>(i)] - sum) <= 1e-5f * (1.0f + std::abs(sum));
  }
  expect(close, "reduce_scatter of random floats", r);
  if (rank_order) expect(exact, "reduce_scatter adds the ranks' chunks in rank order", r);
}

void control_plane(Communicator& world) {
  const int r = world.rank(), n = world.size();
  expect(world.host_all_reduce(double(r + 1)) == n * (n + 1) / 2.0, "host_all_reduce", r);
  const auto all = world.host_gather(std::string(static_cast<std::size_t>(r), 'a' + r), 0);
  if (r == 0)
    for (int q = 0; q < n; ++q)
      expect(all.size() == static_cast<std::size_t>(n) && all[q] == std::string(q, 'a' + q),
             "host_gather", r);
  else
    expect(all.empty(), "host_gather off the root", r);
  if (r == 1) {
    const std::uint64_t v[2] = {7, 11};
    world.host_send(std::as_bytes(std::span(v)), 0);
  } else if (r == 0) {
    std::uint64_t v[2] = {0, 0};
    world.host_recv(std::as_writable_bytes(std::span(v)), 1);
    expect(v[0] == 7 && v[1] == 11, "host_send/host_recv", r);
  }
  world.barrier();
}


// Device tensors go through MPI staged in host memory: every operation on a stand-in device
// whose pages fault on any access but the allocator's copies gives the host result, and counts
// the same bytes.
void device_tensors(Communicator& world) {
  const int r = world.rank(), n = world.size();
  static testing::GuardedAllocator device;  // registered for Device::cuda from here on
  register_allocator(device);
  auto on_device = [&](const std::vector<float>& v) {
    Tensor t{device.allocate(v.size() * 4, "test"), DType::f32,
             Shape{static_cast<std::int64_t>(v.size())}, Device::cuda};
    copy_from_host(v.data(), t);
    return t;
  };
  auto values = [](const Tensor& t) { return read_values(t); };
  const int N = 3 * n;
  std::vector<float> x(N);
  for (int i = 0; i < N; ++i) x[i] = float(r + 1) * float(i);
  world.reset_counters();
  const Tensor a = on_device(x);
  world.all_reduce(a);
  bool ok = true;
  for (int i = 0; i < N; ++i) ok &= values(a)[i] == float(n * (n + 1) / 2) * float(i);
  expect(ok, "device all_reduce", r);
  expect(world.bytes(CommOp::all_reduce).sent == 4ull * 2 * (N - 3),
         "device all_reduce bytes", r);

  const Tensor whole = on_device(x), part = on_device(std::vector<float>(3));
  world.reduce_scatter(whole, part);
  ok = true;
  for (int i = 0; i < 3; ++i) ok &= values(part)[i] == float(n * (n + 1) / 2) * float(3 * r + i);
  expect(ok, "device reduce_scatter", r);

  const Tensor mine = on_device(std::vector<float>(3, float(r))), all = on_device(x);
  world.all_gather(mine, all);
  ok = true;
  for (int i = 0; i < N; ++i) ok &= values(all)[i] == float(i / 3);
  expect(ok, "device all_gather", r);

  // all-to-all: rank r's block q holds 10 r + q; block q of the output comes from rank q.
  std::vector<float> blocks(static_cast<std::size_t>(2 * n));
  for (int i = 0; i < 2 * n; ++i) blocks[static_cast<std::size_t>(i)] = float(10 * r + i / 2);
  const Tensor scattered = on_device(blocks), exchanged = on_device(std::vector<float>(2 * n));
  world.all_to_all(scattered, exchanged);
  ok = true;
  for (int i = 0; i < 2 * n; ++i) ok &= values(exchanged)[i] == float(10 * (i / 2) + r);
  expect(ok, "device all_to_all", r);

  const Tensor b = on_device(std::vector<float>(5, float(r + 10)));
  world.broadcast(b, n - 1);
  expect(values(b)[4] == float(n + 9), "device broadcast", r);

  // A ring of transfers: to the next rank, from the previous one, both in flight at once.
  const Tensor out = on_device(std::vector<float>(7, float(r)));
  const Tensor in = on_device(std::vector<float>(7));
  CommHandle got = world.recv_async(in, (r + n - 1) % n);
  CommHandle sent = world.send_async(out, (r + 1) % n);
  sent.wait();
  got.wait();
  expect(values(in)[6] == float((r + n - 1) % n), "device send/recv", r);
  expect(device.staging > 0, "device tensors were staged", r);
  for (const Tensor& t : {a, whole, part, mine, all, scattered, exchanged, b, out, in})
    device.release(t.data, t.bytes());
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  {
    auto world = make_world_communicator();
    reductions_and_counters(*world);
    sixteen_bit(*world);
    in_place(*world);
    all_to_all(*world);
    all_to_all_v(*world);
    transfers_in_order(*world);
    identical_results(*world);
    reduce_scatter_in_rank_order(*world);
    control_plane(*world);
    device_tensors(*world);
    // sub-groups from a topology: tp groups of size 1 when n is odd
    const int r = world->rank(), n = world->size();
    const Topology topo(world, {.tp = 1, .pp = 1, .dp = n});
    std::vector<float> one(1, 1.0f);
    topo.dp().all_reduce(view(one));
    expect(one[0] == float(n), "dp group all_reduce", r);
    world->barrier();
    if (r == 0 && failures == 0) fmt::print("collectives ok on {} ranks\n", n);
  }
  return failures ? 1 : 0;
}
