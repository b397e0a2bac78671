#include "kintsugi/comm/communicator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/half.hpp"

namespace kintsugi {

std::string_view name_of(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::count: break;
  }
  return "?";
}

namespace {

constexpr int kRingTag = 17;
// MPI counts are ints: longer messages go in pieces.
constexpr std::size_t kMaxMessage = std::size_t{1} << 30;

std::int64_t chunk_begin(std::int64_t n, int chunks, int i) { return n * i / chunks; }

template <class T>
void reduce_into(T* acc, const T* in, std::int64_t n, ReduceOp op) {
  if (op == ReduceOp::sum) {
    for (std::int64_t i = 0; i < n; ++i) acc[i] += in[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
  }
}

// 16-bit floats are summed in float and rounded once per step of the ring.
template <float (*to_float)(std::uint16_t), std::uint16_t (*from_float)(float)>
void reduce_half(std::uint16_t* acc, const std::uint16_t* in, std::int64_t n, ReduceOp op) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = to_float(acc[i]), b = to_float(in[i]);
    acc[i] = from_float(op == ReduceOp::sum ? a + b : std::max(a, b));
  }
}

void reduce_bytes(std::byte* acc, const std::byte* in, std::int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::bf16:
      reduce_half<bf16_to_float, float_to_bf16>(reinterpret_cast<std::uint16_t*>(acc),
                                                reinterpret_cast<const std::uint16_t*>(in), n, op);
      return;
    case DType::f16:
      reduce_half<f16_to_float, float_to_f16>(reinterpret_cast<std::uint16_t*>(acc),
                                              reinterpret_cast<const std::uint16_t*>(in), n, op);
      return;
    case DType::f32:
      reduce_into(reinterpret_cast<float*>(acc), reinterpret_cast<const float*>(in), n, op);
      return;
    case DType::f64:
      reduce_into(reinterpret_cast<double*>(acc), reinterpret_cast<const double*>(in), n, op);
      return;
    default: fail("collectives over {} are not supported yet", name_of(dtype));
  }
}

}  // namespace

Communicator::Communicator(MemoryTracker& memory, MPI_Comm comm, std::string name)
    : owned_worker_(std::make_unique<CommWorker>()),
      worker_(*owned_worker_),
      memory_(memory),
      comm_(comm),
      name_(std::move(name)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Communicator::~Communicator() {
  MPI_Comm comm = comm_;
  worker_.submit([comm]() mutable {
    MPI_Comm_free(&comm);
    return std::vector<MPI_Request>{};
  }).wait();
}

std::shared_ptr<Communicator> Communicator::world(MemoryTracker& memory) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::shared_ptr<Communicator>(new Communicator(memory, comm, "world"));
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  MPI_Comm comm = MPI_COMM_NULL;
  worker_.submit([&] {
    check(MPI_Comm_split(comm_, color == kNoGroup ? MPI_UNDEFINED : color, key, &comm),
          "MPI_Comm_split");
    return std::vector<MPI_Request>{};
  }).wait();
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::shared_ptr<Communicator>(new Communicator(memory_, comm, name));
}

void Communicator::check(int rc, const char* what) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("{} failed in group {} (rank {} of {}): {}: another rank may have died", what, name_, rank_,
       size_, std::string(text, static_cast<std::size_t>(len)));
}

void Communicator::count(CommOp op, std::uint64_t sent, std::uint64_t received) {
  Counter& c = counters_[static_cast<int>(op)];
  c.sent += sent;
  c.received += received;
}

std::byte* Communicator::scratch(std::size_t bytes) {
  if (scratch_.size() < bytes) scratch_ = Buffer(memory_, MemoryKind::communication, bytes);
  return scratch_.data();
}

void Communicator::sendrecv(const std::byte* send, std::size_t send_bytes, int dst,
                            std::byte* recv, std::size_t recv_bytes, int src, CommOp op) {
  // A message goes as ceil(bytes / kMaxMessage) pieces, at least one (an empty message still
  // pairs with its receive): sender and receiver count pieces from the same byte count.
  auto pieces = [](std::size_t bytes) { return std::max<std::size_t>(1, (bytes + kMaxMessage - 1) / kMaxMessage); };
  std::vector<MPI_Request> requests;
  for (std::size_t i = 0, n = pieces(recv_bytes); i < n; ++i) {
    const std::size_t off = i * kMaxMessage, len = std::min(kMaxMessage, recv_bytes - std::min(off, recv_bytes));
    requests.emplace_back();
    check(MPI_Irecv(recv + off, static_cast<int>(len), MPI_BYTE, src, kRingTag, comm_,
                    &requests.back()),
          "MPI_Irecv");
  }
  for (std::size_t i = 0, n = pieces(send_bytes); i < n; ++i) {
    const std::size_t off = i * kMaxMessage, len = std::min(kMaxMessage, send_bytes - std::min(off, send_bytes));
    requests.emplace_back();
    check(MPI_Isend(send + off, static_cast<int>(len), MPI_BYTE, dst, kRingTag, comm_,
                    &requests.back()),
          "MPI_Isend");
  }
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall");
  count(op, send_bytes, recv_bytes);
}

void Communicator::ring_reduce_scatter(std::byte* data, std::int64_t n, DType dtype,
                                       ReduceOp op) {
  const int p = size_, r = rank_;
  const std::size_t es = size_of(dtype);
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  std::byte* tmp = scratch(static_cast<std::size_t>(n / p + 1) * es);
  // Step s: pass chunk (r - s - 1) on, add the incoming chunk (r - s - 2) to ours. After p - 1
  // steps this rank holds the full reduction of chunk r.
  for (int s = 0; s < p - 1; ++s) {
    const int send_chunk = ((r - s - 1) % p + p) % p, recv_chunk = ((r - s - 2) % p + p) % p;
    const std::int64_t sb = chunk_begin(n, p, send_chunk), se = chunk_begin(n, p, send_chunk + 1);
    const std::int64_t rb = chunk_begin(n, p, recv_chunk), re = chunk_begin(n, p, recv_chunk + 1);
    sendrecv(data + sb * es, (se - sb) * es, right, tmp, (re - rb) * es, left,
             CommOp::reduce_scatter);
    reduce_bytes(data + rb * es, tmp, re - rb, dtype, op);
  }
}

void Communicator::ring_all_gather(std::byte* data, std::int64_t n, DType dtype,
                                   CommOp counted_as) {
  const int p = size_, r = rank_;
  const std::size_t es = size_of(dtype);
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  // Step s: pass chunk (r - s) on, receive chunk (r - s - 1) in place.
  for (int s = 0; s < p - 1; ++s) {
    const int send_chunk = ((r - s) % p + p) % p, recv_chunk = ((r - s - 1) % p + p) % p;
    const std::int64_t sb = chunk_begin(n, p, send_chunk), se = chunk_begin(n, p, send_chunk + 1);
    const std::int64_t rb = chunk_begin(n, p, recv_chunk), re = chunk_begin(n, p, recv_chunk + 1);
    sendrecv(data + sb * es, (se - sb) * es, right, data + rb * es, (re - rb) * es, left,
             counted_as);
  }
}

CommHandle Communicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  counters_[static_cast<int>(CommOp::all_reduce)].calls++;
  return worker_.submit([this, t, op] {
    if (size_ > 1) {
      // Count both phases as all-reduce traffic.
      auto* data = static_cast<std::byte*>(t.data);
      const CommBytes before = bytes(CommOp::reduce_scatter);
      ring_reduce_scatter(data, t.numel(), t.dtype, op);
      const CommBytes after = bytes(CommOp::reduce_scatter);
      Counter& rs = counters_[static_cast<int>(CommOp::reduce_scatter)];
      rs.sent -= after.sent - before.sent;
      rs.received -= after.received - before.received;
      count(CommOp::all_reduce, after.sent - before.sent, after.received - before.received);
      ring_all_gather(data, t.numel(), t.dtype, CommOp::all_reduce);
    }
    return std::vector<MPI_Request>{};
  });
}

CommHandle Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out) {
  KINTSUGI_ASSERT(in.dtype == out.dtype && in.numel() == out.numel() * size_);
  counters_[static_cast<int>(CommOp::reduce_scatter)].calls++;
  return worker_.submit([this, in, out] {
    auto* data = static_cast<std::byte*>(in.data);
    ring_reduce_scatter(data, in.numel(), in.dtype, ReduceOp::sum);
    const std::size_t es = size_of(in.dtype);
    if (out.data != data + rank_ * out.numel() * es)
      std::memmove(out.data, data + rank_ * out.numel() * es, out.bytes());
    return std::vector<MPI_Request>{};
  });
}

CommHandle Communicator::all_gather_async(const Tensor& in, const Tensor& out) {
  KINTSUGI_ASSERT(in.dtype == out.dtype && out.numel() == in.numel() * size_);
  counters_[static_cast<int>(CommOp::all_gather)].calls++;
  return worker_.submit([this, in, out] {
    auto* data = static_cast<std::byte*>(out.data);
    std::byte* mine = data + rank_ * in.bytes();
    if (in.data != mine) std::memmove(mine, in.data, in.bytes());
    ring_all_gather(data, out.numel(), out.dtype, CommOp::all_gather);
    return std::vector<MPI_Request>{};
  });
}

CommHandle Communicator::broadcast_async(const Tensor& t, int root) {
  KINTSUGI_ASSERT(root >= 0 && root < size_);
  counters_[static_cast<int>(CommOp::broadcast)].calls++;
  return worker_.submit([this, t, root] {
    // A chain from the root around the ring: everyone but the root receives the tensor once,
    // everyone but the last forwards it once.
    const int pos = (rank_ - root + size_) % size_;
    auto* data = static_cast<std::byte*>(t.data);
    for (std::size_t off = 0; off < t.bytes(); off += kMaxMessage) {
      const int len = static_cast<int>(std::min(kMaxMessage, t.bytes() - off));
      if (pos > 0)
        check(MPI_Recv(data + off, len, MPI_BYTE, (rank_ - 1 + size_) % size_, kRingTag, comm_,
                       MPI_STATUS_IGNORE),
              "MPI_Recv");
      if (pos < size_ - 1)
        check(MPI_Send(data + off, len, MPI_BYTE, (rank_ + 1) % size_, kRingTag, comm_),
              "MPI_Send");
    }
    count(CommOp::broadcast, pos < size_ - 1 ? t.bytes() : 0, pos > 0 ? t.bytes() : 0);
    return std::vector<MPI_Request>{};
  });
}

CommHandle Communicator::send_async(const Tensor& t, int dst, int tag) {
  KINTSUGI_ASSERT(t.bytes() <= kMaxMessage);
  counters_[static_cast<int>(CommOp::send)].calls++;
  return worker_.submit([this, t, dst, tag] {
    std::vector<MPI_Request> req(1);
    check(MPI_Isend(t.data, static_cast<int>(t.bytes()), MPI_BYTE, dst, tag, comm_, &req[0]),
          "MPI_Isend");
    count(CommOp::send, t.bytes(), 0);
    return req;
  });
}

CommHandle Communicator::recv_async(const Tensor& t, int src, int tag) {
  KINTSUGI_ASSERT(t.bytes() <= kMaxMessage);
  counters_[static_cast<int>(CommOp::recv)].calls++;
  return worker_.submit([this, t, src, tag] {
    std::vector<MPI_Request> req(1);
    check(MPI_Irecv(t.data, static_cast<int>(t.bytes()), MPI_BYTE, src, tag, comm_, &req[0]),
          "MPI_Irecv");
    count(CommOp::recv, 0, t.bytes());
    return req;
  });
}

void Communicator::barrier() {
  worker_.submit([this] {
    check(MPI_Barrier(comm_), "MPI_Barrier");
    return std::vector<MPI_Request>{};
  }).wait();
}

CommBytes Communicator::bytes(CommOp op) const {
  const Counter& c = counters_[static_cast<int>(op)];
  return {c.sent.load(), c.received.load(), c.calls.load()};
}

CommBytes Communicator::total_bytes() const {
  CommBytes t;
  for (int i = 0; i < kCommOps; ++i) {
    const CommBytes b = bytes(static_cast<CommOp>(i));
    t.sent += b.sent;
    t.received += b.received;
    t.calls += b.calls;
  }
  return t;
}

void Communicator::reset_counters() {
  for (Counter& c : counters_) c.sent = c.received = c.calls = 0;
}

}  // namespace kintsugi
