// The NCCL communicator on the one GPU of a test machine: NCCL refuses two ranks on one device,
// so its groups here have one rank (a world of one, and groups split from it). Every data-plane
// operation on GPU tensors (all-to-all too) against its definition and in the interface's
// in-place forms, in every element type NCCL sums, with the byte counters of the interface (zero
// for one rank); the handle orders the compute stream after the operation; host tensors go
// through MPI; the factory's choice between NCCL and MPI. Multi-rank NCCL needs a machine with a GPU per rank:
// bench/gpu_layouts.sh runs the layouts there with comm.backend = "nccl".
#ifdef KINTSUGI_WITH_NCCL
#include <gtest/gtest.h>

#include <vector>

#include "kintsugi/backend/cuda/cuda_backend.hpp"
#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"
#include "kintsugi/core/allocator.hpp"
#include "kintsugi/core/host_io.hpp"

namespace kintsugi {
namespace {

// MPI carries the control plane: a world of one when the tests run without mpirun.
void ensure_mpi() {
  static MpiRuntime runtime(nullptr, nullptr);
}

struct DeviceTensor {
  DeviceTensor(DType dtype, std::int64_t n)
      : t{allocator_for(Device::cuda).allocate(static_cast<std::size_t>(n) * size_of(dtype), "test"),
          dtype, Shape{n}, Device::cuda} {}
  ~DeviceTensor() { allocator_for(Device::cuda).release(t.data, t.bytes()); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  Tensor t;
};

class CudaNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    ensure_mpi();
    backend_ = make_cuda_backend(memory_);  // registers the GPU's allocator
    world_ = make_world_communicator(
        {.device = Device::cuda, .timeout_s = 60, .backend = CommBackend::nccl});
  }
  MemoryTracker memory_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Communicator> world_;
};

std::vector<float> ramp(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * float(i % 97 - 40);
  return v;
}

TEST_F(CudaNccl, CollectivesOfOneRankKeepTheirInputsInEveryType) {
  ASSERT_EQ(world_->size(), 1);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    const std::int64_t n = 1001;  // not a multiple of anything NCCL would like
    const std::vector<float> x = ramp(n, 0.5f);
    DeviceTensor a(dtype, n);
    write_values(x.data(), a.t);
    world_->all_reduce(a.t);
    EXPECT_EQ(read_values(a.t), x) << name_of(dtype) << " all_reduce";
    world_->all_reduce(a.t, ReduceOp::max);
    EXPECT_EQ(read_values(a.t), x) << name_of(dtype) << " all_reduce max";
    world_->broadcast(a.t, 0);
    EXPECT_EQ(read_values(a.t), x) << name_of(dtype) << " broadcast";
    // Out of place, then in place (out is in's chunk 0, in is out's chunk 0).
    DeviceTensor b(dtype, n);
    world_->reduce_scatter(a.t, b.t);
    EXPECT_EQ(read_values(b.t), x) << name_of(dtype) << " reduce_scatter";
    world_->reduce_scatter(b.t, b.t);
    EXPECT_EQ(read_values(b.t), x) << name_of(dtype) << " reduce_scatter in place";
    world_->all_gather(b.t, a.t);
    EXPECT_EQ(read_values(a.t), x) << name_of(dtype) << " all_gather";
    world_->all_gather(a.t, a.t);
    EXPECT_EQ(read_values(a.t), x) << name_of(dtype) << " all_gather in place";
    DeviceTensor c(dtype, n);  // all-to-all: one rank's one block, copied on the group's stream
    world_->all_to_all(a.t, c.t);
    EXPECT_EQ(read_values(c.t), x) << name_of(dtype) << " all_to_all";
  }
  DeviceTensor k(DType::i32, 5);
  const std::vector<std::int32_t> ints{3, -1, 7, 0, 2};
  copy_from_host(ints.data(), k.t);
  world_->all_reduce(k.t);
  std::vector<std::int32_t> back(5);
  copy_to_host(k.t, back.data());
  EXPECT_EQ(back, ints);
  // One rank sends nothing: the interface's volumes (communicator.hpp) are zero.
  EXPECT_EQ(world_->total_bytes().sent, 0u);
  EXPECT_GT(world_->bytes(CommOp::all_reduce).calls, 0u);
}

// The handle orders the compute stream, not the host: an op enqueued after wait() sees the
// result. A large all-reduce then a scale on the compute stream, read back.
TEST_F(CudaNccl, ComputeAfterWaitSeesTheResult) {
  const std::int64_t n = std::int64_t{1} << 24;
  std::vector<float> x(static_cast<std::size_t>(n), 1.5f);
  DeviceTensor a(DType::f32, n);
  write_values(x.data(), a.t);
  for (int round = 0; round < 3; ++round) {
    CommHandle h = world_->all_reduce_async(a.t);
    h.wait();
    backend_->scale(a.t, 2.0);
  }
  const std::vector<float> out = read_values(a.t);
  EXPECT_EQ(out.front(), 12.0f);
  EXPECT_EQ(out.back(), 12.0f);
}

TEST_F(CudaNccl, SplitGroupsAndHostTensorsWork) {
  auto group = world_->split(0, 0, "dp");
  ASSERT_TRUE(group);
  EXPECT_EQ(group->name(), "dp");
  EXPECT_EQ(world_->split(Communicator::kNoGroup, 0, "none"), nullptr);
  DeviceTensor a(DType::f32, 64);
  const std::vector<float> x = ramp(64, 1.0f);
  write_values(x.data(), a.t);
  group->all_reduce(a.t);
  EXPECT_EQ(read_values(a.t), x);
  // Host memory goes through MPI; the control plane too.
  std::vector<float> h = x;
  group->all_reduce(Tensor{h.data(), DType::f32, Shape{64}, Device::cpu});
  EXPECT_EQ(h, x);
  EXPECT_EQ(group->host_all_reduce(2.5), 2.5);
  // Pipeline transfers (over MPI, staged): to oneself, paired in posting order.
  DeviceTensor r(DType::f32, 64);
  CommHandle recv = group->recv_async(r.t, 0);
  group->send_async(a.t, 0).wait();
  recv.wait();
  EXPECT_EQ(read_values(r.t), x);
}

TEST_F(CudaNccl, MpiIsChosenWhenAskedAndNcclNeedsTheGpu) {
  auto mpi = make_world_communicator({.device = Device::cuda, .backend = CommBackend::mpi});
  DeviceTensor a(DType::f32, 8);
  const std::vector<float> x = ramp(8, 1.0f);
  write_values(x.data(), a.t);
  mpi->all_reduce(a.t);
  EXPECT_EQ(read_values(a.t), x);
  EXPECT_THROW(make_world_communicator({.device = Device::cpu, .backend = CommBackend::nccl}),
               Error);
}

}  // namespace
}  // namespace kintsugi
#endif
