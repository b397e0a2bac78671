// Layouts whose exchanges run on a device backend: 3D tensor parallelism (docs/parallelism.md,
// "3D tensor parallelism") and context parallelism ("Context parallelism"), one process per rank
// under `mpirun -np 4`, device tensors staged through host memory by the MPI communicator
// (comm/mpi/host_staging.hpp), as ranks sharing one GPU run them:
//
//   device_layout_test cuda DIR     the CUDA backend (in a build without CUDA the emulator's,
//                                 tests/cuda_emulator) trains grids 2x1x2 (x and z collectives,
//                                 the column slices' index gathers) and 1x2x2 (y and z), with
//                                 overlap, cp 4 (the all-to-alls and column copies around
//                                 attention) and cp 2 x tp 2 with sequence parallelism: 2x1x2,
//                                 cp 4 and cp 2 x tp 2 in fp32 against the serial CPU run
//                                 (losses within 1e-5, weights 1e-4 of their scale: the
//                                 single-GPU bars of bench/gpu_layouts.sh), 1x2x2 in bf16
//                                 against the serial run on the same backend (1e-4 and 0.2, its
//                                 bf16 layout bars); and cp 4 with the ring exchange (the block
//                                 kernels, key/value chunks and their gradients sent and received
//                                 on the device) in fp32 against the serial CPU run, and in bf16
//                                 (the running sums in f32) against the serial run on the same
//                                 backend.
//   device_layout_test guarded DIR  the CPU backend's kernels on the guarded stand-in device
//                                 (support/guarded_device.hpp), whose memory the host cannot
//                                 touch outside an op or a copy: grid 2x1x2 in bf16 (x and z,
//                                 the column slices, overlap, master weights) equals the same
//                                 grid on the CPU bit for bit, so no grid code reads or writes
//                                 device memory directly.
//
// Each run also saves its model (save_model gathers the grid's pieces of every weight into whole
// tensors) under DIR, and the saved weights are what is compared. Exits 1 after printing every
// mismatch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kintsugi/backend/cuda/cuda_backend.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "support/guarded_device.hpp"

namespace fs = std::filesystem;
using namespace kintsugi;

namespace {

constexpr std::int64_t kVocab = 300;
constexpr int kMicroBatches = 2;  // per data-parallel rank
constexpr double kLr = 1e-3;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    fmt::print(stderr, "FAILED: {}\n", what);
    ++failures;
  }
}

struct Case {
  std::string name;
  ParallelLayout layout;  // its tp, cp, sequence_parallel and tensor_grid; dp follows the world
  std::string precision;
  int layers = 2, steps = 3;
};

ParallelLayout grid(std::int64_t x, std::int64_t y, std::int64_t z) {
  return {.tp = x * y * z, .tensor_grid = {x, y, z}};
}

// The tiny GPT of the GPU model tests (tests/gpu/test_cuda_models.cpp), shorter: 4 heads of 16,
// 16 positions, micro-batches of 2 sequences (z = 2 takes one each).
RunConfig config(const Case& k, int world) {
  RunConfig c;
  c.model = model_preset("gpt-tiny");
  c.model.n_layer = k.layers;
  c.model.d_model = 64;
  c.model.d_ff = 256;
  c.model.seq_len = 16;
  c.model.vocab_size = kVocab;
  c.train.global_batch = 2 * kMicroBatches;
  c.train.micro_batch = 2;
  c.train.eps = 1e-4;  // as the layout tests (tests/mpi_tests.cmake): rounding noise stays small
  c.train.precision = parse_name<Precision>(k.precision, "precision");
  if (world > 1) {
    c.train.device = Device::cuda;
    c.parallel.tp = k.layout.tp;
    c.parallel.cp = k.layout.cp;
    c.parallel.cp_comm = k.layout.cp_comm;
    c.parallel.sequence_parallel = k.layout.sequence_parallel;
    c.parallel.tensor_grid = k.layout.tensor_grid;
  }
  resolve_layout(c, world);
  return c;
}

struct Trained {
  std::vector<double> losses;  // per step, then the validation loss
};

// Sequences [first, first + count) of micro-batch mb: the same tokens for every layout.
void sample(const RunConfig& c, int mb, std::int64_t first, std::int64_t count,
            std::int32_t* tokens, std::int32_t* targets) {
  const std::int64_t seq = c.model.seq_len;
  for (std::int64_t i = 0; i < count * seq; ++i) {
    const std::int64_t at = first * seq + i;
    tokens[i] = static_cast<std::int32_t>(uniform_int_at(3, mb, at, kVocab));
    targets[i] = static_cast<std::int32_t>(uniform_int_at(4, mb, at, kVocab));
  }
}

Trained train(StageModel& model, const RunConfig& c, const Place& place, int steps,
              const fs::path& saved) {
  // z rank k runs sequences [k mb / Z, (k + 1) mb / Z) of each micro-batch.
  const std::int64_t share = c.train.micro_batch / place.depth_size;
  const StageModel::Sampler s = [&](int mb, std::int32_t* t, std::int32_t* y) {
    sample(c, mb, place.depth_rank * share, share, t, y);
  };
  const double grad_scale = 1.0 / static_cast<double>(c.train.global_batch * c.model.seq_len);
  Trained out;
  for (int step = 0; step < steps; ++step)
    out.losses.push_back(model.train_step(s, kMicroBatches, grad_scale, kLr, 1.0).loss_sum);
  out.losses.push_back(model.evaluate(s, kMicroBatches, kMicroBatches, kMicroBatches));
  // The cp ranks hold the same weights and would write the same files: one of them saves.
  if (place.cp_rank == 0)
    save_model(saved, c.model, model.params(), steps, place.tp, place.pp, model.virtual_stages());
  return out;
}

// The serial run (one process, no topology) on `backend`.
Trained train_serial(Backend& backend, const Case& k, const fs::path& saved) {
  const RunConfig c = config(k, 1);
  const Place place;
  Tracer tracer;
  StageModel model(backend, c, place, tracer);
  return train(model, c, place, k.steps, saved);
}

// The layout over the world's ranks, on `backend`.
Trained train_layout(Backend& backend, const Case& k, const std::shared_ptr<Communicator>& world,
                     const fs::path& saved) {
  const RunConfig c = config(k, world->size());
  const Topology topology(world, c.parallel);
  const Place place(&topology, false);
  Tracer tracer;
  StageModel model(backend, c, place, tracer);
  return train(model, c, place, k.steps, saved);
}

// Rank 0's values on every rank.
std::vector<double> from_rank0(Communicator& world, std::vector<double> values, std::size_t n) {
  values.resize(n, 0.0);
  if (world.rank() != 0) std::fill(values.begin(), values.end(), 0.0);
  world.host_all_reduce(values, ReduceOp::sum);
  return values;
}

void compare_losses(const Trained& got, const std::vector<double>& want, double rtol,
                    const std::string& what) {
  for (std::size_t s = 0; s < want.size(); ++s) {
    const double rel = std::abs(got.losses[s] - want[s]) / std::abs(want[s]);
    const std::string at =
        s + 1 < want.size() ? fmt::format("step {} loss", s + 1) : "validation loss";
    if (rtol == 0)
      expect(got.losses[s] == want[s], fmt::format("{}: {} {} != {}", what, at, got.losses[s], want[s]));
    else
      expect(rel <= rtol, fmt::format("{}: {} {} vs {} (relative {:.2e} > {:.0e})", what, at,
                                      got.losses[s], want[s], rel, rtol));
  }
}

// Every saved tensor: max |a - b| <= rtol max(max |b|, init_std), as check_run compare does
// (biases start at zero); rtol 0 asks for the same bits.
void compare_saved(const fs::path& got, const fs::path& want, double rtol, double init_std,
                   const std::string& what) {
  const auto a = read_model_tensors(got), b = read_model_tensors(want);
  expect(a.size() == b.size(), fmt::format("{}: {} tensors saved, {} expected", what, a.size(), b.size()));
  double worst = 0;
  for (const auto& [name, t] : b) {
    const auto it = a.find(name);
    if (it == a.end() || it->second.values.size() != t.values.size()) {
      expect(false, fmt::format("{}: {} missing or of another size", what, name));
      continue;
    }
    double err = 0, scale = init_std;
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      err = std::max(err, double(std::abs(it->second.values[i] - t.values[i])));
      scale = std::max(scale, double(std::abs(t.values[i])));
    }
    worst = std::max(worst, err / scale);
    if (rtol == 0)
      expect(it->second.values == t.values, fmt::format("{}: {} differs", what, name));
    else
      expect(err <= rtol * scale, fmt::format("{}: {} off by {:.2e} of its scale (> {:.0e})",
                                              what, name, err / scale, rtol));
  }
  fmt::print("{}: weights within {:.2e} of their scale\n", what, worst);
}

// The CUDA backend (the emulator's, in a build without CUDA) against the serial runs.
void on_cuda(const std::shared_ptr<Communicator>& world, const fs::path& dir) {
  MemoryTracker cpu_memory, gpu_memory;
  auto cpu = make_cpu_backend(cpu_memory);
  auto gpu = make_cuda_backend(gpu_memory);
  struct Check {
    Case k;
    bool reference_on_gpu;
    double rtol, weight_rtol;
  };
  const ParallelLayout cp2_tp2{.tp = 2, .sequence_parallel = true, .cp = 2};
  for (const Check& check : {Check{{"2x1x2_fp32", grid(2, 1, 2), "fp32"}, false, 1e-5, 1e-4},
                             Check{{"1x2x2_bf16", grid(1, 2, 2), "bf16"}, true, 1e-4, 0.2},
                             Check{{"cp4_fp32", {.cp = 4}, "fp32"}, false, 1e-5, 1e-4},
                             Check{{"cp4_ring_fp32", {.cp = 4, .cp_comm = CpComm::ring}, "fp32"},
                                   false, 1e-5, 1e-4},
                             Check{{"cp2_tp2_sp_fp32", cp2_tp2, "fp32"}, false, 1e-5, 1e-4},
                             Check{{"cp4_ring_bf16", {.cp = 4, .cp_comm = CpComm::ring}, "bf16"},
                                   true, 1e-4, 0.2}}) {
    const Case& k = check.k;
    const fs::path serial = dir / (k.name + "_serial"), trained = dir / k.name;
    std::vector<double> reference;
    // The reference on rank 0 only (the others wait in the next collective).
    if (world->rank() == 0)
      reference = train_serial(check.reference_on_gpu ? *gpu : *cpu, k, serial).losses;
    reference = from_rank0(*world, reference, k.steps + 1);
    const Trained got = train_layout(*gpu, k, world, trained);
    const std::string what = fmt::format("{} on the CUDA backend vs serial on {}", k.name,
                                         check.reference_on_gpu ? "the same" : "the CPU");
    world->barrier();
    // Losses are sums over the job, the same on every rank; rank 0 checks them and the weights.
    if (world->rank() == 0) {
      compare_losses(got, reference, check.rtol, what);
      compare_saved(trained, serial, check.weight_rtol, config(k, 1).model.init_std, what);
    }
  }
}

// The guarded device against the CPU, the same grid: the same bits.
void guarded(const std::shared_ptr<Communicator>& world, const fs::path& dir) {
  testing::GuardedAllocator guard;
  register_allocator(guard);
  MemoryTracker cpu_memory, device_memory;
  auto cpu = make_cpu_backend(cpu_memory);
  auto inner = make_cpu_backend(device_memory);
  testing::GuardedBackend device(*inner, guard);
  // One layer and two steps: every op opens the guarded memory (mprotect), which is slow.
  for (const Case& k : {Case{.name = "2x1x2_bf16", .layout = grid(2, 1, 2), .precision = "bf16",
                             .layers = 1, .steps = 2}}) {
    const fs::path on_cpu = dir / (k.name + "_cpu"), on_device = dir / (k.name + "_guarded");
    const Trained want = train_layout(*cpu, k, world, on_cpu);
    const int copies = guard.copies;
    const Trained got = train_layout(device, k, world, on_device);
    const std::string what = k.name + " on the guarded device vs the CPU";
    expect(guard.copies > copies, what + ": no copy went through the device's allocator");
    expect(device_memory.peak(MemoryKind::parameters) > 0, what + ": no parameters on the device");
    world->barrier();
    if (world->rank() == 0) {
      compare_losses(got, want.losses, 0, what);
      compare_saved(on_device, on_cpu, 0, 0.02, what);
    }
  }
  expect(!guard.leaked(), "guarded device memory leaked");
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode != "cuda" && mode != "guarded") {
    fmt::print(stderr, "usage: mpirun -np 4 device_layout_test cuda|guarded DIR\n");
    return 2;
  }
  {
    auto world = make_world_communicator(
        {.device = Device::cuda, .timeout_s = 120, .backend = CommBackend::mpi});
    if (world->size() != 4) {
      fmt::print(stderr, "device_layout_test runs on 4 ranks, not {}\n", world->size());
      return 2;
    }
    const fs::path dir = argv[2];
    if (world->rank() == 0) {
      fs::remove_all(dir / mode);
      fs::create_directories(dir / mode);
    }
    world->barrier();
    try {
      if (mode == "cuda")
        on_cuda(world, dir / mode);
      else
        guarded(world, dir / mode);
    } catch (const Error& e) {
      fmt::print(stderr, "rank {}: error: {}\n", world->rank(), e.what());
      return 1;
    }
    const double failed = world->host_all_reduce(static_cast<double>(failures));
    if (world->rank() == 0)
      fmt::print("device_layout_test {}: {}\n", mode, failed == 0 ? "every layout agreed" : "FAILED");
    if (failed != 0) return 1;
  }
  return 0;
}
