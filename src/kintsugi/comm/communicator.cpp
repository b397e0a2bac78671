#include "kintsugi/comm/communicator.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::string_view name_of(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::all_to_all: return "all_to_all";
    case CommOp::count: break;
  }
  return "?";
}

namespace {

// Bytes of chunk i when `numel` elements of `element` bytes are cut into n chunks
// (chunk i = elements [i numel / n, (i + 1) numel / n)).
std::uint64_t chunk_bytes(std::int64_t numel, std::size_t element, int n, int i) {
  return static_cast<std::uint64_t>(numel * (i + 1) / n - numel * i / n) * element;
}

}  // namespace

void Communicator::count(CommOp op, std::uint64_t sent, std::uint64_t received) {
  Counter& c = counters_[static_cast<int>(op)];
  c.sent += sent;
  c.received += received;
  c.calls++;
}

void Communicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_)
    fail("{} in group {}: rank {} is not in 0..{}", what, name_, peer, size_ - 1);
}

CommHandle Communicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  const int n = size_, r = rank_;
  // A bandwidth-optimal all-reduce is a reduce-scatter (every chunk but the rank's own goes out
  // once) and an all-gather (every chunk but the next rank's); uneven chunks count exactly.
  const std::uint64_t b = t.bytes();
  auto chunk = [&](int i) { return chunk_bytes(t.numel(), size_of(t.dtype), n, (i + n) % n); };
  if (n > 1)
    count(CommOp::all_reduce, 2 * b - chunk(r) - chunk(r + 1), 2 * b - chunk(r - 1) - chunk(r));
  else
    count(CommOp::all_reduce, 0, 0);
  return start_all_reduce(t, op);
}

CommHandle Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out) {
  KINTSUGI_ASSERT(in.dtype == out.dtype && in.numel() == out.numel() * size_);
  const std::uint64_t moved = in.bytes() - out.bytes();  // (n-1)/n of the input
  count(CommOp::reduce_scatter, moved, moved);
  return start_reduce_scatter(in, out);
}

CommHandle Communicator::all_gather_async(const Tensor& in, const Tensor& out) {
  KINTSUGI_ASSERT(in.dtype == out.dtype && out.numel() == in.numel() * size_);
  const std::uint64_t moved = out.bytes() - in.bytes();  // (n-1)/n of the output
  count(CommOp::all_gather, moved, moved);
  return start_all_gather(in, out);
}

CommHandle Communicator::all_to_all_async(const Tensor& in, const Tensor& out) {
  KINTSUGI_ASSERT(in.dtype == out.dtype && in.device == out.device &&
                  in.numel() == out.numel() && in.numel() % size_ == 0);
  const auto* a = static_cast<const std::byte*>(in.data);
  const auto* b = static_cast<const std::byte*>(out.data);
  if (in.bytes() > 0 && a < b + out.bytes() && b < a + in.bytes())
    fail("all_to_all in group {}: the input and the output overlap", name_);
  // Every block but the rank's own leaves it, and one block of every other rank arrives.
  const std::uint64_t moved = in.bytes() - in.bytes() / static_cast<std::uint64_t>(size_);
  count(CommOp::all_to_all, moved, moved);
  return start_all_to_all(in, out);
}

CommHandle Communicator::all_to_all_v_async(const Tensor& in, std::span<const std::int64_t> send,
                                            const Tensor& out,
                                            std::span<const std::int64_t> recv) {
  KINTSUGI_ASSERT(in.dtype == out.dtype && in.device == out.device);
  KINTSUGI_ASSERT(static_cast<int>(send.size()) == size_ && static_cast<int>(recv.size()) == size_);
  std::int64_t sent = 0, received = 0, send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    const auto j = static_cast<std::size_t>(r);
    KINTSUGI_ASSERT(send[j] >= 0 && recv[j] >= 0);
    send_total += send[j];
    recv_total += recv[j];
    if (r != rank_) {
      sent += send[j];
      received += recv[j];
    }
  }
  KINTSUGI_ASSERT(send_total <= in.numel() && recv_total <= out.numel());
  KINTSUGI_ASSERT(send[static_cast<std::size_t>(rank_)] == recv[static_cast<std::size_t>(rank_)]);
  const auto* a = static_cast<const std::byte*>(in.data);
  const auto* b = static_cast<const std::byte*>(out.data);
  const std::size_t es = size_of(in.dtype);
  if (send_total > 0 && recv_total > 0 && a < b + recv_total * es && b < a + send_total * es)
    fail("all_to_all_v in group {}: the input and the output overlap", name_);
  count(CommOp::all_to_all, static_cast<std::uint64_t>(sent) * es,
        static_cast<std::uint64_t>(received) * es);
  return start_all_to_all_v(in, {send.begin(), send.end()}, out, {recv.begin(), recv.end()});
}

CommHandle Communicator::broadcast_async(const Tensor& t, int root) {
  check_peer(root, "broadcast");
  // A chain from the root: every rank but the root receives the buffer, every rank but the
  // last forwards it.
  const int pos = (rank_ - root + size_) % size_;
  count(CommOp::broadcast, pos < size_ - 1 ? t.bytes() : 0, pos > 0 ? t.bytes() : 0);
  return start_broadcast(t, root);
}

CommHandle Communicator::send_async(const Tensor& t, int dst) {
  check_peer(dst, "send");
  count(CommOp::send, t.bytes(), 0);
  return start_send(t, dst);
}

CommHandle Communicator::recv_async(const Tensor& t, int src) {
  check_peer(src, "recv");
  count(CommOp::recv, 0, t.bytes());
  return start_recv(t, src);
}

double Communicator::host_all_reduce(double value, ReduceOp op) {
  host_all_reduce(std::span<double>(&value, 1), op);
  return value;
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
