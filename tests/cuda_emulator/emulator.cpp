// The fiber scheduler of the CUDA emulator (cuda_emulator.hpp): one fiber per CUDA thread of a
// block, switched at barriers. A round runs every runnable fiber in order until it stops (at a
// barrier, or at its end); a fiber that stops passes on to the next one of the round itself, and
// the last one returns to the scheduler, which releases the barriers that every fiber concerned
// has reached and starts the next round: one switch per stop, as many as a fiber runs through
// (a tensor-core product emulated with shuffles stops each lane 16 times).
#include <sys/mman.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// Switches stacks: saves the callee-saved registers and the stack pointer into *save, then
// continues on `load` (a stack saved the same way, or a fresh one from init_stack).
extern "C" void cuda_emu_switch(void** save, void* load);
#if defined(__x86_64__)
asm(R"(
.pushsection .text
.globl cuda_emu_switch
.type cuda_emu_switch,@function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuda_emu_switch,.-cuda_emu_switch
.popsection
)");
#else
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

namespace cuda_emu {

namespace {

// AddressSanitizer keeps a shadow of every stack and must be told when the code moves to
// another one (scripts/sanitize.sh builds the emulator with it): before each switch, which
// stack comes next; after it, that the move is done (which also gives the scheduler's own
// stack, never allocated here, to the first switch that leaves it). Without a sanitizer, no-ops.
void start_switch(void** fake_stack_save, const void* bottom, std::size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}
void finish_switch(void* fake_stack_save, const void** bottom_old, std::size_t* size_old) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#else
  (void)fake_stack_save, (void)bottom_old, (void)size_old;
#endif
}

constexpr std::size_t kStackBytes = std::size_t{128} << 10;
constexpr int kMaxThreads = 1024;

enum class Wait : std::uint8_t { running, block, warp, done };

struct Fiber {
  void* sp = nullptr;
  void* fake_stack = nullptr;  // AddressSanitizer's, while the fiber waits (start_switch)
  Wait wait = Wait::running;
  ThreadPlace place;
  unsigned mask = 0;
  std::uint64_t value = 0, result = 0;
  int source = 0;
  bool xor_mode = false;
};

struct Block {
  std::vector<Fiber> fibers;
  void* scheduler_sp = nullptr;
  const void* scheduler_bottom = nullptr;  // the scheduler's stack (finish_switch)
  std::size_t scheduler_size = 0;
  int current = -1;
  // The round being run: the fibers in the order they run, and how many have stopped so far.
  const std::vector<int>* round = nullptr;
  bool reverse = false;
  int stopped = 0;
  bool from_scheduler = false;  // the fiber resumed next is resumed by the scheduler
  const std::function<void()>* body = nullptr;
  const char* kernel = "";
  // Kept up to date by the fibers as they stop, so a scheduling round costs what it runs.
  int done = 0, at_barrier = 0;
  std::vector<int> warp_waiting, warp_done;
};

thread_local Block* active = nullptr;
thread_local std::vector<unsigned char> dynamic_shared;
thread_local char* stacks = nullptr;  // kMaxThreads stacks, mapped once per OS thread
std::mutex attributes_mutex;
std::map<const void*, int> max_shared;  // cudaFuncAttributeMaxDynamicSharedMemorySize
std::uint64_t launch_count = 0;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "CUDA emulator: %s (kernel %s)\n", message.c_str(),
               active ? active->kernel : "none");
  std::abort();
}

char* stack_of(int thread);

// A fiber that stops hands over to the next fiber of the round, or after the last one back to
// the scheduler. fake_stack_save: where AddressSanitizer keeps the fiber's fake stack until it
// is resumed (nullptr for a fiber that ends).
void pass_on(Fiber& self, void** fake_stack_save) {
  Block& b = *active;
  const int n = static_cast<int>(b.round->size());
  if (++b.stopped == n) {
    start_switch(fake_stack_save, b.scheduler_bottom, b.scheduler_size);
    cuda_emu_switch(&self.sp, b.scheduler_sp);
    return;
  }
  const int next = (*b.round)[b.reverse ? n - 1 - b.stopped : b.stopped];
  b.current = next;
  start_switch(fake_stack_save, stack_of(next), kStackBytes);
  cuda_emu_switch(&self.sp, b.fibers[next].sp);
}

// A fiber resumed (or started): the switch is done. When the scheduler resumed it, the stack it
// left is the scheduler's, which the last fiber of the round returns to.
void resumed(void* fake_stack) {
  Block& b = *active;
  const void* bottom = nullptr;
  std::size_t size = 0;
  finish_switch(fake_stack, &bottom, &size);
  if (b.from_scheduler) {
    b.scheduler_bottom = bottom;
    b.scheduler_size = size;
    b.from_scheduler = false;
  }
}

[[noreturn]] void fiber_main() {
  resumed(nullptr);
  Fiber& self = active->fibers[active->current];
  (*active->body)();
  self.wait = Wait::done;
  ++active->done;
  ++active->warp_done[active->current / 32];
  pass_on(self, nullptr);  // never resumed
  die("a finished thread was resumed");
}

void* init_stack(char* base) {
  // A stack used before holds the shadow of frames that never returned (fiber_main's).
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(base, kStackBytes);
#endif
  // A 16-byte aligned top; entering fiber_main through `ret` leaves rsp = 8 mod 16, as a call.
  // Tops are staggered by up to 4 KiB so the fibers' hot stack frames do not all map to the same
  // cache sets.
  const std::size_t stagger = (static_cast<std::size_t>(base - stacks) / kStackBytes % 64) * 64;
  auto top = reinterpret_cast<std::uintptr_t>(base + kStackBytes - stagger) & ~std::uintptr_t{15};
  auto** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                                   // fiber_main's (unused) return address
  *--sp = reinterpret_cast<void*>(&fiber_main);      // where cuda_emu_switch returns to
  for (int i = 0; i < 6; ++i) *--sp = nullptr;       // rbp, rbx, r12-r15
  return sp;
}

char* stack_of(int thread) {
  if (!stacks) {
    void* p = mmap(nullptr, kStackBytes * kMaxThreads, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("no memory for fiber stacks");
    stacks = static_cast<char*>(p);
  }
  return stacks + kStackBytes * static_cast<std::size_t>(thread);
}

// A fiber that waits at a barrier, until a later round runs it again.
void stop(Fiber& f) {
  pass_on(f, &f.fake_stack);
  resumed(f.fake_stack);
}

// A warp whose lanes all wait at a shuffle: every lane receives its source lane's value.
bool release_warp(Block& b, int warp, int lanes, std::vector<int>& next) {
  const int first = warp * 32;
  if (b.warp_waiting[warp] == 0 || b.warp_waiting[warp] + b.warp_done[warp] < lanes) return false;
  if (b.warp_done[warp] > 0 || lanes < 32)
    die("a warp shuffle with lanes missing (exited threads, or a block size that is not a "
        "multiple of 32)");
  const Fiber& lead = b.fibers[first];
  for (int t = first; t < first + lanes; ++t) {
    const Fiber& f = b.fibers[t];
    if (f.mask != 0xffffffffu) die("a shuffle with a partial mask");
    if (f.xor_mode != lead.xor_mode || (f.xor_mode && f.source != lead.source))
      die("lanes of one warp at different shuffles");
  }
  for (int lane = 0; lane < 32; ++lane) {
    Fiber& f = b.fibers[first + lane];
    const int from = f.xor_mode ? (lane ^ f.source) & 31 : f.source & 31;
    f.result = b.fibers[first + from].value;
    f.wait = Wait::running;
    next.push_back(first + lane);
  }
  b.warp_waiting[warp] = 0;
  return true;
}

// Runs every fiber until it stops at a barrier or ends, releases the barriers every fiber
// concerned has reached, and repeats until the block is done.
void run_block(Block& b, int threads, bool reverse) {
  const int warps = (threads + 31) / 32;
  b.done = b.at_barrier = 0;
  b.warp_waiting.assign(warps, 0);
  b.warp_done.assign(warps, 0);
  std::vector<int> runnable(threads), next;
  for (int t = 0; t < threads; ++t) runnable[t] = t;
  while (!runnable.empty()) {
    // The round: its first fiber, which passes on to the others (pass_on).
    b.round = &runnable;
    b.reverse = reverse;
    b.stopped = 0;
    b.current = reverse ? runnable.back() : runnable.front();
    b.from_scheduler = true;
    void* fake_stack = nullptr;
    start_switch(&fake_stack, stack_of(b.current), kStackBytes);
    cuda_emu_switch(&b.scheduler_sp, b.fibers[b.current].sp);
    finish_switch(fake_stack, nullptr, nullptr);
    if (b.done == threads) return;
    next.clear();
    if (b.at_barrier > 0 && b.at_barrier + b.done == threads) {
      if (b.done > 0) die("__syncthreads() reached by part of a block after other threads exited");
      for (int t = 0; t < threads; ++t) {
        b.fibers[t].wait = Wait::running;
        next.push_back(t);
      }
      b.at_barrier = 0;
    }
    for (int w = 0; w < warps; ++w) release_warp(b, w, std::min(32, threads - 32 * w), next);
    if (next.empty())
      die("threads wait at different barriers (a __syncthreads or shuffle in divergent code)");
    runnable.swap(next);  // in thread order: one barrier kind is released per round
  }
}

bool fail_launch(const char* name, const std::string& why) {
  std::fprintf(stderr, "CUDA emulator: launch of %s refused: %s\n", name, why.c_str());
  return false;
}

bool valid_launch(const void* kernel, const char* name, dim3 grid, dim3 block,
                  std::size_t shared) {
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64)
    return fail_launch(name, "block of " + std::to_string(threads) + " threads");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535)
    return fail_launch(name, "grid " + std::to_string(grid.x) + " x " + std::to_string(grid.y) +
                                 " x " + std::to_string(grid.z));
  int allowed = 48 << 10;
  {
    std::lock_guard lock(attributes_mutex);
    if (auto it = max_shared.find(kernel); it != max_shared.end()) allowed = std::max(allowed, it->second);
  }
  if (shared > static_cast<std::size_t>(allowed) || shared > (227u << 10))
    return fail_launch(name, std::to_string(shared) + " bytes of dynamic shared memory, " +
                                 std::to_string(allowed) + " allowed");
  return true;
}

}  // namespace

void set_last_error(cudaError_t error);

const ThreadPlace& place() {
  if (!active || active->current < 0) die("threadIdx read outside a kernel");
  return active->fibers[active->current].place;
}

void* dynamic_shared_memory() { return dynamic_shared.data(); }

void set_max_dynamic_shared(const void* kernel, int bytes) {
  std::lock_guard lock(attributes_mutex);
  max_shared[kernel] = bytes;
}

void launch(const void* kernel, const char* name, dim3 grid, dim3 block, std::size_t shared,
            const std::function<void()>& body) {
  if (active) die("a kernel launched from inside a kernel");
  if (!valid_launch(kernel, name, grid, block, shared)) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  ++launch_count;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  Block b;
  b.body = &body;
  b.kernel = name;
  b.fibers.resize(threads);
  active = &b;
  std::uint64_t block_number = 0;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx, ++block_number) {
        dynamic_shared.assign(shared, 0xff);  // uninitialized: NaN in every float type
        for (int t = 0; t < threads; ++t) {
          Fiber& f = b.fibers[t];
          f = Fiber{};
          f.place.thread = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          f.place.block = {bx, by, bz};
          f.place.block_dim = block;
          f.place.grid_dim = grid;
          f.sp = init_stack(stack_of(t));
        }
        run_block(b, threads, block_number % 2 == 1);
      }
  active = nullptr;
}

void syncthreads() {
  Fiber& f = active->fibers[active->current];
  f.wait = Wait::block;
  ++active->at_barrier;
  stop(f);
}

std::uint64_t shuffle(unsigned mask, std::uint64_t bits, int source, bool xor_mode) {
  Fiber& f = active->fibers[active->current];
  f.mask = mask;
  f.value = bits;
  f.source = source;
  f.xor_mode = xor_mode;
  f.wait = Wait::warp;
  ++active->warp_waiting[active->current / 32];
  stop(f);
  return f.result;
}

void kernel_error(const std::string& message) {
  if (active && active->current >= 0) {
    const ThreadPlace& p = active->fibers[active->current].place;
    die(message + " by thread (" + std::to_string(p.thread.x) + "," + std::to_string(p.thread.y) +
        ") of block (" + std::to_string(p.block.x) + "," + std::to_string(p.block.y) + ")");
  }
  die(message);
}

std::uint64_t launches() { return launch_count; }

}  // namespace cuda_emu
