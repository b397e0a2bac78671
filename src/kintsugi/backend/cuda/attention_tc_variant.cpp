// The tensor-core attention kernels' variants (attention_tc.hpp): read from the environment at
// the first call, replaced by tests.
#include <cstdlib>
#include <cstring>

#include "kintsugi/backend/cuda/attention_tc.hpp"

namespace kintsugi::cuda::attn_tc {

namespace {

// On unless the variable is "0" (or, for an opt-in variant, off unless it is "1").
bool on(const char* name, bool by_default = true) {
  const char* v = std::getenv(name);
  if (!v) return by_default;
  return by_default ? std::strcmp(v, "0") != 0 : std::strcmp(v, "1") == 0;
}

Variant& current() {
  static Variant v = [] {
    Variant r;
    r.tensor_cores = on("KINTSUGI_TENSOR_CORE_ATTENTION");
    r.tile_masks = on("KINTSUGI_ATTN_TILE_MASKS");
    r.skip_masked = on("KINTSUGI_ATTN_SKIP_MASKED");
    r.heavy_first = on("KINTSUGI_ATTN_HEAVY_FIRST");
    r.fused_backward = on("KINTSUGI_ATTN_BWD_FUSED", false);
    if (const char* more = std::getenv("KINTSUGI_ATTN_BWD_MORE_BLOCKS")) {
      r.more_blocks_dkdv = !std::strcmp(more, "1") || !std::strcmp(more, "dkdv");
      r.more_blocks_dq = !std::strcmp(more, "1") || !std::strcmp(more, "dq");
    }  // unset: the default, dK/dV's only
    if (const char* passes = std::getenv("KINTSUGI_ATTN_BWD_DKDV_PASSES"))
      r.dkdv_two_passes = !std::strcmp(passes, "2");
    if (const char* mib = std::getenv("KINTSUGI_ATTN_BWD_SCRATCH_MIB"))
      r.fused_scratch_cap = static_cast<std::size_t>(std::strtoull(mib, nullptr, 10)) << 20;
    return r;
  }();
  return v;
}

}  // namespace

Variant variant() { return current(); }
void set_variant(const Variant& v) { current() = v; }

}  // namespace kintsugi::cuda::attn_tc
