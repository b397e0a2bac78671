#include "kintsugi/comm/mpi/mpi_communicator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <numeric>
#include <string_view>

#include "kintsugi/comm/mpi/chunk_sum.hpp"
#include "kintsugi/comm/mpi/host_staging.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"
#include "kintsugi/comm/mpi/mpi_types.hpp"
#include "kintsugi/comm/mpi/startup_deadline.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi {

namespace {

// Transfers of both planes use one tag, so MPI's non-overtaking rule pairs them in order.
constexpr int kTransferTag = 0;
// MPI counts are ints: longer byte messages go as several, posted in order.
constexpr std::size_t kMaxPiece = std::size_t{1} << 30;

int comm_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

int comm_size(MPI_Comm c) {
  int n = 1;
  MPI_Comm_size(c, &n);
  return n;
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  const int n = comm_size(comm);
  std::vector<int> local(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
  std::iota(local.begin(), local.end(), 0);
  MPI_Group_translate_ranks(group, n, local.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("{} failed: {}: another rank may have died", call,
       std::string(text, static_cast<std::size_t>(len)));
}

int int_count(std::int64_t n, const char* what) {
  if (n > INT_MAX)
    fail("{} of {} elements per rank exceeds MPI's int count: use smaller buckets or units", what,
         n);
  return static_cast<int>(n);
}

// Posts `bytes` as pieces of at most kMaxPiece (at least one: an empty message still pairs).
template <class Post>
void in_pieces(std::size_t bytes, std::vector<MPI_Request>& requests, Post post) {
  for (std::size_t off = 0;; off += kMaxPiece) {
    requests.emplace_back();
    post(off, static_cast<int>(std::min(kMaxPiece, bytes - off)), &requests.back());
    if (off + kMaxPiece >= bytes) return;
  }
}

OpLabel label(const char* op, std::size_t bytes = 0, int peer = -1, bool sending = false) {
  OpLabel l;
  l.op = op;
  l.bytes = bytes;
  l.peer = peer;
  l.sending = sending;
  return l;
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::string name, MPI_Comm control,
                                 std::shared_ptr<StallWatch> watch)
    : Communicator(std::move(name), comm_rank(control), comm_size(control)),
      watch_(std::move(watch)),
      control_(control) {
  status_ = std::make_unique<GroupStatus>(this->name(), world_ranks_of(control_), rank());
  watch_->add(status_.get());
  // The data plane's own communicator: its collectives never mix with the control plane's.
  this->control(label("create group"), [&](std::vector<MPI_Request>& r) {
    r.emplace_back();
    check(MPI_Comm_idup(control_, &data_, &r.back()), "MPI_Comm_idup");
  });
  progress_ = std::make_unique<ProgressThread>(*status_, *watch_);
}

MpiCommunicator::~MpiCommunicator() {
  progress_.reset();  // completes everything submitted
  watch_->remove(status_.get());
  MPI_Comm_free(&data_);
  MPI_Comm_free(&control_);
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  // MPI_Comm_split has no non-blocking form: a barrier under the deadline first makes sure every
  // member has arrived, so the split itself cannot hang on a stalled one.
  control(label("split"), [&](std::vector<MPI_Request>& r) {
    r.emplace_back();
    check(MPI_Ibarrier(control_, &r.back()), "MPI_Ibarrier");
  });
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(control_, color == kNoGroup ? MPI_UNDEFINED : color, key, &comm),
        "MPI_Comm_split");
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiCommunicator>(name, comm, watch_);
}

void MpiCommunicator::control(OpLabel label,
                              const std::function<void(std::vector<MPI_Request>&)>& post) {
  label.plane = Plane::control;
  const std::uint64_t ticket = status_->posted(label);
  std::vector<MPI_Request> requests;
  try {
    post(requests);
    await_requests(requests, *status_, label, *watch_);
  } catch (...) {
    status_->finished(ticket);
    throw;
  }
  status_->finished(ticket);
}

// ---- data plane

// Each operation stages device tensors through host memory (host_staging.hpp) and runs on the
// host copies; done() copies results back once the operation completes.

CommHandle MpiCommunicator::start_all_reduce(const Tensor& device_t, ReduceOp op) {
  if (size() == 1) return {};
  const auto [t, done] = stage(device_t, true, true);
  const MPI_Datatype type = mpi_type(t.dtype);
  const MPI_Op mop = mpi_op(op, t.dtype);
  const std::size_t es = size_of(t.dtype);
  return progress_->submit({label("all_reduce", t.bytes()), [=, this] {
    std::vector<MPI_Request> r;
    // Pieces of at most INT_MAX elements, each reduced in place.
    for (std::int64_t off = 0; off < t.numel(); off += INT_MAX) {
      const int n = static_cast<int>(std::min<std::int64_t>(INT_MAX, t.numel() - off));
      r.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, static_cast<std::byte*>(t.data) + off * es, n, type,
                           mop, data_, &r.back()),
            "MPI_Iallreduce");
    }
    return r;
  }, done});
}

// How a reduce-scatter runs (docs/benchmarks.md, "Collectives: the communicator vs the library
// called directly"): by default each rank sends every other rank that rank's chunk in one
// MPI_Ialltoallv, exactly the (n-1)/n of the buffer a reduce-scatter must move, and adds the
// chunks it receives in rank order (chunk_sum.hpp). Open MPI 4.1's non-blocking
// MPI_Ireduce_scatter_block reduces the whole buffer to one rank and scatters it from there,
// and measured 2.4x slower at 64 MiB on two ranks, slower than an all-reduce of the same
// buffer. KINTSUGI_MPI_REDUCE_SCATTER=library restores the library's call.
static bool reduce_scatter_by_alltoall() {
  static const bool alltoall =
      Switches::process().text(Switch::mpi_reduce_scatter) == "alltoall";
  return alltoall;
}

CommHandle MpiCommunicator::start_reduce_scatter(const Tensor& device_in,
                                                 const Tensor& device_out) {
  const auto [in, out, done] = stage_in_out(device_in, device_out);
  if (size() == 1) {
    if (out.data != in.data) std::memmove(out.data, in.data, out.bytes());
    if (done) done();
    return {};
  }
  const int count = int_count(out.numel(), "reduce_scatter");
  const MPI_Datatype type = mpi_type(in.dtype);
  const int n = size(), me = rank();
  if (!reduce_scatter_by_alltoall() || in.numel() > INT_MAX) {
    // The library's own call, in place over `in`: it leaves this rank's reduced chunk at its
    // start, which then moves to out. (Displacements of the all-to-all are ints: a buffer of
    // more than INT_MAX elements takes this way too.)
    const MPI_Op mop = mpi_op(ReduceOp::sum, in.dtype);
    auto move_out = then([in, out] {
      if (out.data != in.data) std::memmove(out.data, in.data, out.bytes());
    }, done);
    return progress_->submit({label("reduce_scatter", in.bytes()), [=, this] {
      std::vector<MPI_Request> r(1);
      check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, in.data, count, type, mop, data_, &r[0]),
            "MPI_Ireduce_scatter_block");
      return r;
    }, move_out});
  }
  // Rank r's chunk of `in` goes to rank r; the other ranks' copies of ours land in `received`
  // (one slot per other rank, in rank order). The counts must live until the call completes.
  struct Exchange {
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
    std::unique_ptr<std::byte[]> received;
  };
  auto x = std::make_shared<Exchange>();
  const auto slots = static_cast<std::size_t>(n);
  x->send_counts.assign(slots, count);
  x->send_counts[static_cast<std::size_t>(me)] = 0;
  x->recv_counts = x->send_counts;
  x->send_displs.resize(slots);
  x->recv_displs.resize(slots);
  for (int r = 0; r < n; ++r) {
    x->send_displs[static_cast<std::size_t>(r)] = r * count;
    x->recv_displs[static_cast<std::size_t>(r)] = (r < me ? r : std::max(r - 1, 0)) * count;
  }
  x->received = std::make_unique_for_overwrite<std::byte[]>(
      static_cast<std::size_t>(n - 1) * out.bytes());
  auto add_up = then([in, out, x, n, me] {
    const std::size_t es = size_of(in.dtype);
    std::vector<const void*> sources;
    for (int r = 0; r < n; ++r)
      sources.push_back(r == me ? static_cast<const std::byte*>(in.data) + me * out.bytes()
                                : x->received.get() + x->recv_displs[static_cast<std::size_t>(r)] * es);
    sum_chunks(in.dtype, sources, out.data, out.numel());
  }, done);
  return progress_->submit({label("reduce_scatter", in.bytes()), [=, this] {
    std::vector<MPI_Request> r(1);
    check(MPI_Ialltoallv(in.data, x->send_counts.data(), x->send_displs.data(), type,
                         x->received.get(), x->recv_counts.data(), x->recv_displs.data(), type,
                         data_, &r[0]),
          "MPI_Ialltoallv");
    return r;
  }, add_up});
}

CommHandle MpiCommunicator::start_all_gather(const Tensor& device_in,
                                             const Tensor& device_out) {
  const auto [in, out, done] = stage_in_out(device_in, device_out);
  std::byte* mine = static_cast<std::byte*>(out.data) + rank() * in.bytes();
  auto move_in = [in, mine] {
    if (in.data != mine) std::memmove(mine, in.data, in.bytes());
  };
  if (size() == 1) {
    move_in();
    if (done) done();
    return {};
  }
  const int count = int_count(in.numel(), "all_gather");
  const MPI_Datatype type = mpi_type(in.dtype);
  return progress_->submit({label("all_gather", out.bytes()), [=, this] {
    move_in();  // in place: this rank's chunk is where the gathered result keeps it
    std::vector<MPI_Request> r(1);
    check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data, count, type, data_, &r[0]),
          "MPI_Iallgather");
    return r;
  }, done});
}

CommHandle MpiCommunicator::start_broadcast(const Tensor& device_t, int root) {
  if (size() == 1) return {};
  const auto [t, done] = stage(device_t, rank() == root, rank() != root);
  return progress_->submit({label("broadcast", t.bytes()), [=, this] {
    std::vector<MPI_Request> r;
    in_pieces(t.bytes(), r, [&](std::size_t off, int len, MPI_Request* req) {
      check(MPI_Ibcast(static_cast<std::byte*>(t.data) + off, len, MPI_BYTE, root, data_, req),
            "MPI_Ibcast");
    });
    return r;
  }, done});
}

CommHandle MpiCommunicator::transfer(const Tensor& device_t, int peer, bool sending) {
  const auto [t, done] = stage(device_t, sending, !sending);
  return progress_->submit({label(sending ? "send" : "recv", t.bytes(), peer, sending), [=, this] {
    std::vector<MPI_Request> r;
    in_pieces(t.bytes(), r, [&](std::size_t off, int len, MPI_Request* req) {
      std::byte* p = static_cast<std::byte*>(t.data) + off;
      check(sending ? MPI_Isend(p, len, MPI_BYTE, peer, kTransferTag, data_, req)
                    : MPI_Irecv(p, len, MPI_BYTE, peer, kTransferTag, data_, req),
            sending ? "MPI_Isend" : "MPI_Irecv");
    });
    return r;
  }, done});
}

CommHandle MpiCommunicator::start_send(const Tensor& t, int dst) { return transfer(t, dst, true); }
CommHandle MpiCommunicator::start_recv(const Tensor& t, int src) { return transfer(t, src, false); }

CommHandle MpiCommunicator::start_all_to_all(const Tensor& device_in,
                                             const Tensor& device_out) {
  const auto [in, out, done] = stage_in_out(device_in, device_out);
  if (size() == 1) {
    if (out.bytes() > 0) std::memcpy(out.data, in.data, out.bytes());
    if (done) done();
    return {};
  }
  const int count = int_count(in.numel() / size(), "all_to_all");
  const MPI_Datatype type = mpi_type(in.dtype);
  return progress_->submit({label("all_to_all", in.bytes()), [=, this] {
    std::vector<MPI_Request> r(1);
    check(MPI_Ialltoall(in.data, count, type, out.data, count, type, data_, &r[0]),
          "MPI_Ialltoall");
    return r;
  }, done});
}

// Uneven blocks (the experts' token rows, model/moe_layer.cpp): one MPI_Ialltoallv, its counts
// and displacements kept alive until it completes.
CommHandle MpiCommunicator::start_all_to_all_v(const Tensor& device_in,
                                               std::vector<std::int64_t> send,
                                               const Tensor& device_out,
                                               std::vector<std::int64_t> recv) {
  const auto [in, out, done] = stage_in_out(device_in, device_out);
  const std::size_t es = size_of(in.dtype);
  if (size() == 1) {
    if (send[0] > 0) std::memcpy(out.data, in.data, static_cast<std::size_t>(send[0]) * es);
    if (done) done();
    return {};
  }
  struct Exchange {
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  };
  auto x = std::make_shared<Exchange>();
  std::int64_t sd = 0, rd = 0;
  for (std::size_t r = 0; r < send.size(); ++r) {
    x->send_counts.push_back(int_count(send[r], "all_to_all_v"));
    x->recv_counts.push_back(int_count(recv[r], "all_to_all_v"));
    x->send_displs.push_back(int_count(sd, "all_to_all_v"));
    x->recv_displs.push_back(int_count(rd, "all_to_all_v"));
    sd += send[r];
    rd += recv[r];
  }
  const MPI_Datatype type = mpi_type(in.dtype);
  return progress_->submit({label("all_to_all_v", static_cast<std::size_t>(sd) * es), [=, this] {
    std::vector<MPI_Request> r(1);
    check(MPI_Ialltoallv(in.data, x->send_counts.data(), x->send_displs.data(), type, out.data,
                         x->recv_counts.data(), x->recv_displs.data(), type, data_, &r[0]),
          "MPI_Ialltoallv");
    return r;
  }, done});
}

// ---- control plane

void MpiCommunicator::host_all_reduce(std::span<double> values, ReduceOp op) {
  if (size() == 1) return;
  control(label("host_all_reduce", values.size_bytes()),
          [&](std::vector<MPI_Request>& r) {
            r.emplace_back();
            check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                 MPI_DOUBLE, op == ReduceOp::sum ? MPI_SUM : MPI_MAX, control_,
                                 &r.back()),
                  "MPI_Iallreduce");
          });
}

std::vector<std::string> MpiCommunicator::host_gather(const std::string& mine, int root) {
  if (size() == 1) return {mine};
  const bool at_root = rank() == root;
  std::vector<std::int64_t> lengths(at_root ? static_cast<std::size_t>(size()) : 0);
  const std::int64_t length = static_cast<std::int64_t>(mine.size());
  control(label("host_gather lengths"), [&](std::vector<MPI_Request>& r) {
    r.emplace_back();
    check(MPI_Igather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, root, control_,
                      &r.back()),
          "MPI_Igather");
  });
  std::vector<int> counts, offsets;
  std::int64_t total = 0;
  for (std::int64_t n : lengths) {
    counts.push_back(static_cast<int>(n));
    offsets.push_back(static_cast<int>(total));
    total += n;
  }
  if (total > INT_MAX) fail("host_gather of {} bytes in group {}: over 2 GiB", total, name());
  std::string all(static_cast<std::size_t>(total), '\0');
  control(label("host_gather", mine.size()), [&](std::vector<MPI_Request>& r) {
    r.emplace_back();
    check(MPI_Igatherv(mine.data(), static_cast<int>(length), MPI_CHAR, all.data(),
                       counts.data(), offsets.data(), MPI_CHAR, root, control_, &r.back()),
          "MPI_Igatherv");
  });
  std::vector<std::string> out;
  for (std::size_t i = 0; i < counts.size(); ++i)
    out.push_back(
        all.substr(static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(counts[i])));
  return out;
}

void MpiCommunicator::host_send(std::span<const std::byte> bytes, int dst) {
  control(label("host_send", bytes.size(), dst, true),
          [&](std::vector<MPI_Request>& r) {
            in_pieces(bytes.size(), r, [&](std::size_t off, int len, MPI_Request* req) {
              check(MPI_Isend(bytes.data() + off, len, MPI_BYTE, dst, kTransferTag, control_, req),
                    "MPI_Isend");
            });
          });
}

void MpiCommunicator::host_recv(std::span<std::byte> bytes, int src) {
  control(label("host_recv", bytes.size(), src),
          [&](std::vector<MPI_Request>& r) {
            in_pieces(bytes.size(), r, [&](std::size_t off, int len, MPI_Request* req) {
              check(MPI_Irecv(bytes.data() + off, len, MPI_BYTE, src, kTransferTag, control_, req),
                    "MPI_Irecv");
            });
          });
}

void MpiCommunicator::barrier() {
  if (size() == 1) return;
  control(label("barrier"), [&](std::vector<MPI_Request>& r) {
    r.emplace_back();
    check(MPI_Ibarrier(control_, &r.back()), "MPI_Ibarrier");
  });
}

std::shared_ptr<Communicator> make_mpi_world(const CommOptions& options) {
  if (!MpiRuntime::initialized())
    fail("the MPI communicator needs MPI: start kintsugi under mpirun or srun");
  // Both duplications of the world block until every rank has arrived; the stall watch that
  // bounds every later wait is what they build (startup_deadline.hpp).
  const StartupDeadline deadline("the creation of the world communicator (MPI_Comm_dup)",
                                 options.timeout_s);
  auto watch = std::make_shared<StallWatch>(options.timeout_s, options.deadlock_check_s);
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &control);
  return std::make_shared<MpiCommunicator>("world", control, std::move(watch));
}

}  // namespace kintsugi
