#include "kintsugi/comm/nccl/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <list>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

using Clock = std::chrono::steady_clock;

using cuda::check;

void check_nccl(ncclResult_t status, const char* what) {
  if (status == ncclSuccess) return;
  fail("NCCL error in {}: {}{}", what, ncclGetErrorString(status),
       status == ncclRemoteError || status == ncclSystemError ? ": another rank may have died"
                                                              : "");
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
      return ncclUint8;
  }
  fail("NCCL cannot move this tensor type");
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// One operation on a group's stream, from launch until its event has fired.
struct InFlight {
  cudaEvent_t done = nullptr;
  ncclComm_t comm = nullptr;
  std::string group, op;
  int group_size = 0;
  std::size_t bytes = 0;
  Clock::time_point started;
  ~InFlight() {
    if (done) cudaEventDestroy(done);
  }
};

// The deadline behind every NCCL operation of the process (comm.timeout_s), and NCCL's
// asynchronous errors. One thread polls the operations in flight; the NCCL kernels of a group
// whose peer stalled or died never finish, so ending the job is the only way out.
class NcclWatch {
 public:
  NcclWatch(int device, double timeout_s)
      : device_(device), timeout_(std::chrono::duration<double>(timeout_s)) {
    thread_ = std::thread([this] { run(); });
  }
  ~NcclWatch() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  NcclWatch(const NcclWatch&) = delete;
  NcclWatch& operator=(const NcclWatch&) = delete;

  void track(std::shared_ptr<InFlight> op) {
    {
      std::lock_guard lock(mutex_);
      flights_.push_back(std::move(op));
    }
    cv_.notify_all();
  }

  // A communicator about to be destroyed (its operations done): the watch lets go of them
  // first, so it never asks a destroyed communicator for errors.
  void forget(ncclComm_t comm) {
    std::lock_guard lock(mutex_);
    flights_.remove_if([comm](const auto& f) { return f->comm == comm; });
  }

 private:
  void run() {
    cudaSetDevice(device_);
    std::unique_lock lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_; });
      for (auto it = flights_.begin(); it != flights_.end();) {
        const cudaError_t status = cudaEventQuery((*it)->done);
        if (status == cudaSuccess) {
          it = flights_.erase(it);
          continue;
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError((*it)->comm, &async);
        if (status != cudaErrorNotReady || async != ncclSuccess ||
            Clock::now() - (*it)->started > timeout_)
          expired(**it, status, async);
        ++it;
      }
    }
  }

  [[noreturn]] void expired(const InFlight& op, cudaError_t status, ncclResult_t async) {
    const double waited = std::chrono::duration<double>(Clock::now() - op.started).count();
    std::string why;
    if (async != ncclSuccess)
      why = fmt::format("NCCL reported {} (a peer may have died)", ncclGetErrorString(async));
    else if (status != cudaErrorNotReady)
      why = fmt::format("CUDA reported {}", cudaGetErrorString(status));
    else
      why = fmt::format("not done after {:.0f} s (comm.timeout_s = {:g}): a rank of the group "
                        "stalled or died",
                        waited, timeout_.count());
    std::fprintf(stderr,
                 "kintsugi: error (rank %d): NCCL %s of %.1f MiB on group '%s' (%d ranks): %s; "
                 "ending the job\n",
                 world_rank(), op.op.c_str(), static_cast<double>(op.bytes) / 1048576.0,
                 op.group.c_str(), op.group_size, why.c_str());
    std::fflush(stderr);
    ncclCommAbort(op.comm);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

  int device_;
  std::chrono::duration<double> timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<InFlight>> flights_;
  bool stop_ = false;
  std::thread thread_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> host, std::shared_ptr<NcclWatch> watch)
      : Communicator(host->name(), host->rank(), host->size()),
        host_(std::move(host)),
        watch_(std::move(watch)) {
    const cuda::Context& ctx = cuda::Context::get();
    device_ = ctx.device();
    compute_ = ctx.stream();
    check(cudaSetDevice(device_), "cudaSetDevice");
    // Rank 0 of the group makes the id; the others receive it over the control plane.
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const auto bytes = std::as_writable_bytes(std::span(&id, 1));
    if (rank() == 0) {
      for (int r = 1; r < size(); ++r) host_->host_send(bytes, r);
    } else {
      host_->host_recv(bytes, 0);
    }
    check_nccl(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
    // The highest priority, so that communication kernels get SMs while compute runs.
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest),
               "cudaStreamCreateWithPriority");
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    watch_->forget(comm_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    auto host = host_->split(color, key, name);
    if (!host) return nullptr;
    return std::make_shared<NcclCommunicator>(std::move(host), watch_);
  }

  void host_all_reduce(std::span<double> values, ReduceOp op) override {
    host_->host_all_reduce(values, op);
  }
  std::vector<std::string> host_gather(const std::string& mine, int root) override {
    return host_->host_gather(mine, root);
  }
  void host_send(std::span<const std::byte> bytes, int dst) override { host_->host_send(bytes, dst); }
  void host_recv(std::span<std::byte> bytes, int src) override { host_->host_recv(bytes, src); }
  void barrier() override { host_->barrier(); }

 protected:
  CommHandle start_all_reduce(const Tensor& t, ReduceOp op) override {
    if (!on_gpu(t, t)) return host_->all_reduce_async(t, op);
    const ncclRedOp_t nop = op == ReduceOp::max ? ncclMax : ncclSum;
    return enqueue("all_reduce", t.bytes(), [&](cudaStream_t s) {
      return ncclAllReduce(t.data, t.data, static_cast<std::size_t>(t.numel()), nccl_type(t.dtype),
                           nop, comm_, s);
    });
  }
  // NCCL's in-place forms are exactly the interface's: out as in's chunk rank() (reduce-scatter),
  // in as out's chunk rank() (all-gather).
  CommHandle start_reduce_scatter(const Tensor& in, const Tensor& out) override {
    if (!on_gpu(in, out)) return host_->reduce_scatter_async(in, out);
    return enqueue("reduce_scatter", in.bytes(), [&](cudaStream_t s) {
      return ncclReduceScatter(in.data, out.data, static_cast<std::size_t>(out.numel()),
                               nccl_type(out.dtype), ncclSum, comm_, s);
    });
  }
  CommHandle start_all_gather(const Tensor& in, const Tensor& out) override {
    if (!on_gpu(in, out)) return host_->all_gather_async(in, out);
    return enqueue("all_gather", out.bytes(), [&](cudaStream_t s) {
      return ncclAllGather(in.data, out.data, static_cast<std::size_t>(in.numel()),
                           nccl_type(in.dtype), comm_, s);
    });
  }
  // NCCL has no all-to-all call: one group of a send and a receive per peer, the rank's own
  // block copied on the same stream.
  CommHandle start_all_to_all(const Tensor& in, const Tensor& out) override {
    if (!on_gpu(in, out)) return host_->all_to_all_async(in, out);
    const auto count = static_cast<std::size_t>(in.numel() / size());
    const std::size_t block = count * size_of(in.dtype);
    const ncclDataType_t type = nccl_type(in.dtype);
    const auto* from = static_cast<const std::byte*>(in.data);
    auto* to = static_cast<std::byte*>(out.data);
    return enqueue("all_to_all", in.bytes(), [&](cudaStream_t s) {
      const auto at = [&](int r) { return static_cast<std::size_t>(r) * block; };
      if (block > 0)
        check(cudaMemcpyAsync(to + at(rank()), from + at(rank()), block, cudaMemcpyDeviceToDevice,
                              s),
              "cudaMemcpyAsync (all_to_all)");
      ncclResult_t status = ncclGroupStart();
      for (int peer = 0; peer < size() && status == ncclSuccess; ++peer) {
        if (peer == rank()) continue;
        status = ncclSend(from + at(peer), count, type, peer, comm_, s);
        if (status == ncclSuccess) status = ncclRecv(to + at(peer), count, type, peer, comm_, s);
      }
      const ncclResult_t ended = ncclGroupEnd();
      return status != ncclSuccess ? status : ended;
    });
  }
  // Uneven blocks: the same group of sends and receives, each of its own count.
  CommHandle start_all_to_all_v(const Tensor& in, std::vector<std::int64_t> send,
                                const Tensor& out, std::vector<std::int64_t> recv) override {
    if (!on_gpu(in, out)) return host_->all_to_all_v_async(in, send, out, recv);
    const std::size_t es = size_of(in.dtype);
    const ncclDataType_t type = nccl_type(in.dtype);
    const auto* from = static_cast<const std::byte*>(in.data);
    auto* to = static_cast<std::byte*>(out.data);
    std::vector<std::size_t> send_at(send.size() + 1, 0), recv_at(recv.size() + 1, 0);
    for (std::size_t r = 0; r < send.size(); ++r) {
      send_at[r + 1] = send_at[r] + static_cast<std::size_t>(send[r]) * es;
      recv_at[r + 1] = recv_at[r] + static_cast<std::size_t>(recv[r]) * es;
    }
    return enqueue("all_to_all_v", send_at.back(), [&](cudaStream_t s) {
      const auto me = static_cast<std::size_t>(rank());
      if (send[me] > 0)
        check(cudaMemcpyAsync(to + recv_at[me], from + send_at[me],
                              static_cast<std::size_t>(send[me]) * es, cudaMemcpyDeviceToDevice, s),
              "cudaMemcpyAsync (all_to_all_v)");
      ncclResult_t status = ncclGroupStart();
      for (int peer = 0; peer < size() && status == ncclSuccess; ++peer) {
        const auto p = static_cast<std::size_t>(peer);
        if (p == me) continue;
        if (send[p] > 0)
          status = ncclSend(from + send_at[p], static_cast<std::size_t>(send[p]), type, peer,
                            comm_, s);
        if (status == ncclSuccess && recv[p] > 0)
          status = ncclRecv(to + recv_at[p], static_cast<std::size_t>(recv[p]), type, peer,
                            comm_, s);
      }
      const ncclResult_t ended = ncclGroupEnd();
      return status != ncclSuccess ? status : ended;
    });
  }
  CommHandle start_broadcast(const Tensor& t, int root) override {
    if (!on_gpu(t, t)) return host_->broadcast_async(t, root);
    return enqueue("broadcast", t.bytes(), [&](cudaStream_t s) {
      return ncclBroadcast(t.data, t.data, static_cast<std::size_t>(t.numel()),
                           nccl_type(t.dtype), root, comm_, s);
    });
  }
  // Pipeline transfers: over MPI (see the header).
  CommHandle start_send(const Tensor& t, int dst) override { return host_->send_async(t, dst); }
  CommHandle start_recv(const Tensor& t, int src) override { return host_->recv_async(t, src); }

 private:
  bool on_gpu(const Tensor& a, const Tensor& b) const {
    if (a.device != b.device)
      fail("collective on group {}: the input is on the {} and the output on the {}", name(),
           name_of(a.device), name_of(b.device));
    return a.device == Device::cuda;
  }

  // Runs `launch` on the group's stream after everything enqueued on the compute stream so far;
  // the handle makes the compute stream wait for it.
  CommHandle enqueue(const char* op, std::size_t bytes,
                     const std::function<ncclResult_t(cudaStream_t)>& launch) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaEventRecord(ready_, compute_), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    check_nccl(launch(stream_), op);
    auto flight = std::make_shared<InFlight>();
    flight->comm = comm_;
    flight->group = name();
    flight->op = op;
    flight->group_size = size();
    flight->bytes = bytes;
    flight->started = Clock::now();
    check(cudaEventCreateWithFlags(&flight->done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(flight->done, stream_), "cudaEventRecord");
    watch_->track(flight);
    const cudaStream_t compute = compute_;
    const int device = device_;
    return CommHandle::on_device(
        [flight, compute, device] {
          check(cudaSetDevice(device), "cudaSetDevice");
          check(cudaStreamWaitEvent(compute, flight->done, 0), "cudaStreamWaitEvent");
        },
        [flight] { return cudaEventQuery(flight->done) == cudaSuccess; });
  }

  std::shared_ptr<Communicator> host_;
  std::shared_ptr<NcclWatch> watch_;
  int device_ = 0;
  cudaStream_t compute_ = nullptr, stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::string nccl_unusable_reason(Communicator& world) {
  const cuda::Context& ctx = cuda::Context::get();
  char bus[64] = {};
  check(cudaDeviceGetPCIBusId(bus, sizeof bus, ctx.device()), "cudaDeviceGetPCIBusId");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string mine = fmt::format("{} GPU {}", host, bus);
  const std::vector<std::string> all = world.host_gather(mine, 0);
  double shared = 0;
  std::string first;
  std::set<std::string> seen;
  for (const auto& a : all)
    if (!seen.insert(a).second && shared == 0) {
      shared = 1;
      first = a;
    }
  shared = world.host_all_reduce(shared, ReduceOp::max);
  if (shared == 0) return "";
  return fmt::format("two or more ranks share a GPU{} (NCCL refuses that): give every rank a GPU "
                     "of its own (at most one rank per GPU), or set comm.backend = \"mpi\"",
                     first.empty() ? "" : " (" + first + ")");
}

std::shared_ptr<Communicator> make_nccl_world(std::shared_ptr<Communicator> host,
                                              const CommOptions& options) {
  auto watch = std::make_shared<NcclWatch>(cuda::Context::get().device(), options.timeout_s);
  return std::make_shared<NcclCommunicator>(std::move(host), std::move(watch));
}

}  // namespace kintsugi
