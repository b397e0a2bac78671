#include "kintsugi/core/switches.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <regex>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

using K = SwitchKind;

// The table. Defaults are what each site did before with the variable unset; the tests
// (tests/unit/test_switches.cpp) hold the parsing, docs.lists the docs (docs/switches.md).
constexpr std::array<SwitchSpec, kSwitchCount> kSwitchTable{{
    {Switch::gemm_blocks, "KINTSUGI_GEMM_BLOCKS", K::integer, "auto", "auto|[0-9]{1,9}",
     "CPU f32 GEMMs: auto cuts each into blocks by its shape alone, the same bits on any "
     "thread count; N > 0 into N blocks; 0 hands it to OpenBLAS's own threads, whose bits "
     "depend on the thread count",
     "docs/benchmarks.md, \"GPT-2 124M training step on CPU: kintsugi vs PyTorch\": a step "
     "beside one busy process, 1.9x its quiet time with 0"},
    {Switch::typed_kernels, "KINTSUGI_TYPED_KERNELS", K::flag, "1", "0|1",
     "CUDA: the memory-bound kernels written per type with 16-byte accesses; 0: the generic "
     "kernels",
     "docs/gpu.md, \"Typed kernels, fused loss and GEMM epilogues\": 88.8 ms with 0, 78.7-79.0 "
     "with every path on"},
    {Switch::gemm_bgrad, "KINTSUGI_GEMM_BGRAD", K::flag, "0", "0|1",
     "CUDA: 1 computes the bias gradient in the weight-gradient GEMM's epilogue (cuBLASLt "
     "BGRADB) instead of column sums after it",
     "docs/gpu.md, \"GEMM epilogues\" and \"Typed kernels, fused loss and GEMM epilogues\": "
     "79.0 ms with it, 78.4 without, so opt-in"},
    {Switch::gemm_gelu, "KINTSUGI_GEMM_GELU", K::flag, "1", "0|1",
     "CUDA: GELU (and its gradient) in the MLP GEMMs' epilogues; 0: the GEMM, then GELU "
     "kernels",
     "docs/gpu.md, \"GEMM epilogues\" and \"Typed kernels, fused loss and GEMM epilogues\": "
     "80.0 ms with 0, 78.7-79.0 with every path on"},
    {Switch::gemm_autotune, "KINTSUGI_GEMM_AUTOTUNE", K::flag, "1", "0|1",
     "CUDA: time cuBLASLt's candidate algorithms per GEMM shape and keep the fastest; 0: the "
     "heuristic's first choice",
     "docs/gpu.md, \"GEMM algorithms\" and \"Typed kernels, fused loss and GEMM epilogues\": "
     "79.9 ms with 0, 78.7-79.0 with every path on"},
    {Switch::tensor_core_attention, "KINTSUGI_TENSOR_CORE_ATTENTION", K::flag, "1", "0|1",
     "CUDA: attention on the tensor-core kernels where they apply; 0: the CUDA-core kernels",
     "docs/gpu.md, \"Tensor-core attention\""},
    {Switch::attn_tile_masks, "KINTSUGI_ATTN_TILE_MASKS", K::flag, "1", "0|1",
     "CUDA attention: masks only on the tiles that need them, in 32-bit offsets; 0: every "
     "element of every tile in 64-bit",
     "docs/gpu.md, \"Typed kernels, fused loss and GEMM epilogues\": 82.3 ms with 0, 78.7-79.0 "
     "with every path on"},
    {Switch::attn_skip_masked, "KINTSUGI_ATTN_SKIP_MASKED", K::flag, "1", "0|1",
     "CUDA attention (with tile masks): skip the products the causal mask hides from a whole "
     "warp",
     "docs/gpu.md, \"Typed kernels, fused loss and GEMM epilogues\": 78.7 ms with 0, "
     "78.7-79.0 with every path on: no difference measured"},
    {Switch::attn_heavy_first, "KINTSUGI_ATTN_HEAVY_FIRST", K::flag, "1", "0|1",
     "CUDA attention: blocks ordered heaviest tiles first; 0: unit by unit",
     "docs/gpu.md, \"Typed kernels, fused loss and GEMM epilogues\": 80.8 ms with 0, 78.7-79.0 "
     "with every path on"},
    {Switch::attn_bwd_fused, "KINTSUGI_ATTN_BWD_FUSED", K::flag, "0", "0|1",
     "CUDA attention (with tile masks): 1 takes the backward in one pass over the key tiles, "
     "dQ from f32 partials; 0: the dK/dV and dQ kernels",
     "docs/gpu.md, \"Typed kernels, fused loss and GEMM epilogues\": 79.0 ms with it, 77.7 "
     "without, so opt-in"},
    {Switch::attn_bwd_more_blocks, "KINTSUGI_ATTN_BWD_MORE_BLOCKS", K::choice, "dkdv",
     "0|1|dkdv|dq",
     "CUDA attention backward: which kernels are compiled for one more resident block per SM "
     "(dkdv: the dK/dV kernel, dq: the dQ kernel, 1: both, 0: neither); same bits",
     "docs/gpu.md, \"Main re-timed (2026-11-27)\": 75.0 ms with 0, 73.1 dkdv, 74.8 dq, 73.2 "
     "both"},
    {Switch::attn_bwd_dkdv_passes, "KINTSUGI_ATTN_BWD_DKDV_PASSES", K::choice, "1", "1|2",
     "CUDA attention backward, head sizes up to 64: 2 takes each 64-query tile of the dK/dV "
     "kernel in two passes of 32; same bits",
     "docs/gpu.md, \"Main re-timed (2026-11-27)\": prepared without a GPU, opt-in until "
     "timed"},
    {Switch::attn_bwd_scratch_mib, "KINTSUGI_ATTN_BWD_SCRATCH_MIB", K::integer, "256", "[0-9]{1,9}",
     "CUDA attention's fused backward: the most scratch (MiB) its dQ partials take; larger "
     "calls go through it in slices",
     "not timed: 256 MiB holds 120 of GPT-2 124M's 384 units at B = 32, T = 1024, 4 slices "
     "(backend/cuda/attention_tc.hpp; the partials: docs/gpu.md, \"What it does\")"},
    {Switch::attn_cudnn, "KINTSUGI_ATTN_CUDNN", K::choice, "0", "0|1|any",
     "CUDA attention on cuDNN's fused graphs where they apply: 1 only deterministic engines, "
     "any any engine; 0: kintsugi's kernels",
     "docs/gpu.md, \"Main re-timed (2026-11-27)\": prepared without a GPU, not yet run on one"},
    {Switch::cuda_sync, "KINTSUGI_CUDA_SYNC", K::flag, "0", "0|1",
     "CUDA: 1 synchronizes after every kernel launch, so that an error names the kernel that "
     "caused it (debugging; slow)",
     "a debugging aid: without it a kernel's error surfaces at the next synchronizing call, "
     "under another name (backend/cuda/cuda_check.hpp)"},
    {Switch::fused_loss, "KINTSUGI_FUSED_LOSS", K::flag, "1", "0|1",
     "Logits in the compute type and, without vocabulary parallelism, the loss in one fused "
     "pass; 0: f32 logits and three passes, as before",
     "docs/gpu.md, \"Typed kernels, fused loss and GEMM epilogues\": 93.0 ms with 0, 78.7-79.0 "
     "with every path on; its numerics: docs/memory.md, \"Mixed precision\""},
    {Switch::multi_tensor, "KINTSUGI_MULTI_TENSOR", K::flag, "1", "0|1",
     "AdamW and the gradient norm over many tensors in one op (one launch on a GPU); 0: one op "
     "per tensor; same bits",
     "docs/gpu.md, \"Main re-timed (2026-11-27)\": 76.1 ms with 0, 75.4 with it"},
    {Switch::profile_events, "KINTSUGI_PROFILE_EVENTS", K::flag, "1", "0|1",
     "bench step --profile: time ops with the device's events where it has a timeline; 0: the "
     "host clock, synchronizing after each op",
     "docs/gpu.md, \"Running on a GPU machine\": to compare the two"},
    {Switch::energy, "KINTSUGI_ENERGY", K::flag, "1", "0|1",
     "Read the energy counters (RAPL, NVML) in train, bench step and tune; 0: no reads, no "
     "per-step reduction across ranks",
     "docs/energy.md, \"What is read (`core/energy_counter.hpp`)\""},
    {Switch::mpi_reduce_scatter, "KINTSUGI_MPI_REDUCE_SCATTER", K::choice, "alltoall",
     "alltoall|library",
     "MPI reduce-scatter as one all-to-all and a sum in rank order; library: the MPI "
     "library's own call",
     "docs/benchmarks.md, \"Collectives: the communicator vs the library called directly\": "
     "the library's call 2.4x slower at 64 MiB on two ranks"},
    {Switch::keep_freed_memory, "KINTSUGI_KEEP_FREED_MEMORY", K::flag, "1", "0|1",
     "MPI ranks keep freed memory in the process (one malloc arena, no mmap, no trimming) "
     "unless a MALLOC_* setting is given; 0: malloc as configured",
     "docs/benchmarks.md, \"Collectives: the communicator vs the library called directly\": a "
     "64 MiB all-reduce 200 ms with 0, 13 without"},
    {Switch::startup_timeout_s, "KINTSUGI_STARTUP_TIMEOUT_S", K::seconds, "600",
     "[0-9]*\\.?[0-9]+([eE][-+]?[0-9]+)?",
     "How long an MPI rank waits in startup (MPI initialisation, the node split) for the "
     "others before it ends the job",
     "docs/parallelism.md, \"Errors and failures\": a stalled rank must not hang the job"},
    {Switch::test_kill_rank, "KINTSUGI_TEST_KILL_RANK", K::text, "", "[0-9]{1,9}:[0-9]{1,18}",
     "Test hook, RANK:STEP: that rank of train kills itself at that step",
     "docs/parallelism.md, \"Errors and failures\": a dead rank ends the job"},
    {Switch::test_die_in_save, "KINTSUGI_TEST_DIE_IN_SAVE", K::text, "", "[0-9]{1,9}:[0-9]{1,18}",
     "Test hook, RANK:STEP: that rank of train dies after writing its shard of that step's "
     "checkpoint",
     "docs/checkpoints.md, \"Format\": an incomplete checkpoint is never resumed from"},
    {Switch::test_slow_micro_batches, "KINTSUGI_TEST_SLOW_MICRO_BATCHES", K::text, "",
     "(train|eval):[0-9]{1,9}(:[0-9]{1,18})?",
     "Test hook, train:MS[:FROM] or eval:MS: every training micro-batch (of steps FROM and "
     "later) or evaluation micro-batch after the first step takes MS ms longer",
     "docs/checkpoints.md, \"Pre-emption\": steps that last seconds on a tiny model"},
    {Switch::test_stop_at_start, "KINTSUGI_TEST_STOP_AT_START", K::text, "",
     "[0-9]{1,9}:(init|split)",
     "Test hook, RANK:WHERE: that world rank stops itself (SIGSTOP) before MPI initialisation "
     "(init) or the node split (split)",
     "docs/parallelism.md, \"Errors and failures\": the startup deadline ends the job"},
    {Switch::test_powercap_root, "KINTSUGI_TEST_POWERCAP_ROOT", K::path, "", ".+",
     "Test hook: train reads RAPL from this fake powercap tree instead of /sys/class/powercap",
     "docs/energy.md, \"What is read (`core/energy_counter.hpp`)\": tested on machines "
     "without RAPL"},
}};

constexpr bool in_order() {
  for (std::size_t i = 0; i < kSwitchTable.size(); ++i)
    if (static_cast<std::size_t>(kSwitchTable[i].id) != i) return false;
  return true;
}
static_assert(in_order(), "the table lists the switches in the order of enum Switch");

// "0 or 1", "alltoall or library": a choice's values for a message; other kinds' pattern.
std::string takes(const SwitchSpec& s) {
  if (s.kind == K::seconds) return "a number of seconds above 0, at most 1e9";
  if (s.kind == K::path) return "a path";
  if (s.kind != K::flag && s.kind != K::choice) return fmt::format("the form {}", s.values);
  std::string text(s.values);
  const std::size_t last = text.rfind('|');
  text.replace(last, 1, " or ");
  for (std::size_t bar; (bar = text.find('|')) != std::string::npos;) text.replace(bar, 1, ", ");
  return text;
}

void check_value(const SwitchSpec& s, const std::string& value) {
  bool ok = std::regex_match(value, std::regex(std::string(s.values)));
  if (ok && s.kind == K::seconds) {
    const double seconds = std::strtod(value.c_str(), nullptr);
    ok = seconds > 0 && seconds <= 1e9;
  }
  if (!ok) fail("{}={}: not a value it takes ({})", s.name, value, takes(s));
}

std::size_t index(Switch s) { return static_cast<std::size_t>(s); }

}  // namespace

std::span<const SwitchSpec> switch_specs() { return kSwitchTable; }
const SwitchSpec& spec_of(Switch s) { return kSwitchTable[index(s)]; }

Switches::Switches(const std::map<std::string, std::string>& environment) {
  for (const SwitchSpec& s : kSwitchTable) {
    const auto given = environment.find(std::string(s.name));
    const bool set = given != environment.end() && !given->second.empty();
    if (set) check_value(s, given->second);
    values_[index(s.id)] = set ? given->second : std::string(s.default_value);
    set_[index(s.id)] = set;
  }
}

const Switches& Switches::process() {
  static const Switches switches = [] {
    std::map<std::string, std::string> environment;
    for (const SwitchSpec& s : kSwitchTable) {
      const std::string name(s.name);
      if (const char* v = std::getenv(name.c_str())) environment[name] = v;
    }
    return Switches(environment);
  }();
  return switches;
}

bool Switches::on(Switch s) const {
  KINTSUGI_ASSERT(spec_of(s).kind == K::flag);
  return values_[index(s)] == "1";
}

std::optional<std::int64_t> Switches::integer(Switch s) const {
  KINTSUGI_ASSERT(spec_of(s).kind == K::integer);
  const std::string& v = values_[index(s)];
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::strtoll(v.c_str(), nullptr, 10);
}

double Switches::seconds(Switch s) const {
  KINTSUGI_ASSERT(spec_of(s).kind == K::seconds);
  return std::strtod(values_[index(s)].c_str(), nullptr);
}

const std::string& Switches::text(Switch s) const {
  const SwitchKind kind = spec_of(s).kind;
  KINTSUGI_ASSERT(kind == K::choice || kind == K::text || kind == K::path);
  return values_[index(s)];
}

bool Switches::is_set(Switch s) const { return set_[index(s)]; }

nlohmann::json Switches::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const SwitchSpec& s : kSwitchTable) j[std::string(s.name)] = values_[index(s.id)];
  return j;
}

std::string Switches::describe() const {
  std::string text;
  for (const SwitchSpec& s : kSwitchTable) {
    const std::string& v = values_[index(s.id)];
    text += fmt::format("{} = {}{}  ({}, default {}, takes {})\n", s.name,
                        v.empty() ? "(none)" : v, set_[index(s.id)] ? " (set)" : "",
                        name_of(s.kind), s.default_value.empty() ? "none" : s.default_value,
                        s.values);
    text += fmt::format("    {}\n    measured/why: {}\n", s.description, s.reference);
  }
  return text;
}

}  // namespace kintsugi
