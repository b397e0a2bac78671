#pragma once
// A CPU emulator of the CUDA execution model, for testing the CUDA backend's kernels where no GPU
// is present. Each CUDA thread of a block runs as a fiber; __syncthreads() and warp shuffles are
// barriers at which the scheduler switches fibers, so blocks behave as on a GPU as far as the
// kernels' synchronization is concerned. Blocks run one after another, and threads between two
// barriers run to completion one at a time, alternately in ascending and descending order from
// block to block, so a kernel that reads shared memory before the barrier that should order it
// gets a wrong result in one of the two orders.
//
// It checks what a GPU would reject or leave undefined: launch configurations (block size, grid
// size, dynamic shared memory against the kernel's attribute), barriers reached by only part of a
// block, shuffles in partial warps, accesses outside a Ref's elements, and cuBLASLt calls whose
// layouts or alignments do not match their descriptors. A violation prints a message and makes
// the launch fail as a GPU would (the next CUDA call returns an error).
//
// What it does not model: timing, memory ordering between blocks, register and shared memory
// limits per SM, or the accuracy of the GPU's math functions (the host's libm is used).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace cuda_emu {

struct ThreadPlace {
  uint3 thread, block;
  dim3 block_dim, grid_dim;
};

// The calling fiber's place in the launch.
const ThreadPlace& place();
void* dynamic_shared_memory();

template <class F>
const void* kernel_id(F* f) {
  return reinterpret_cast<const void*>(f);
}
void set_max_dynamic_shared(const void* kernel, int bytes);

// Runs body once per thread of every block.
void launch(const void* kernel, const char* name, dim3 grid, dim3 block, std::size_t shared,
            const std::function<void()>& body);

void syncthreads();
// Lane exchange within the warp: the value of lane `source` (xor_mode: lane ^ source).
std::uint64_t shuffle(unsigned mask, std::uint64_t bits, int source, bool xor_mode);

// Whether p points into memory from cudaMalloc.
bool is_device_memory(const void* p);

// A failed check inside a kernel (out-of-bounds index): reported, and the launch fails.
void kernel_error(const std::string& message);

// Launches since the process started, and products cuBLASLt's stand-in computed.
std::uint64_t launches();
std::uint64_t blas_products();

}  // namespace cuda_emu
