// The tensor-core attention kernels' variants (attention_tc.hpp): from the switches at the first
// call (core/switches.hpp), replaced by tests.
#include "kintsugi/backend/cuda/attention_tc.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi::cuda::attn_tc {

Variant variant_from(const Switches& s) {
  Variant r;
  r.tensor_cores = s.on(Switch::tensor_core_attention);
  r.tile_masks = s.on(Switch::attn_tile_masks);
  r.skip_masked = s.on(Switch::attn_skip_masked);
  r.heavy_first = s.on(Switch::attn_heavy_first);
  r.fused_backward = s.on(Switch::attn_bwd_fused);
  const std::string& more = s.text(Switch::attn_bwd_more_blocks);
  r.more_blocks_dkdv = more == "1" || more == "dkdv";
  r.more_blocks_dq = more == "1" || more == "dq";
  r.dkdv_two_passes = s.text(Switch::attn_bwd_dkdv_passes) == "2";
  r.fused_scratch_cap = static_cast<std::size_t>(*s.integer(Switch::attn_bwd_scratch_mib)) << 20;
  return r;
}

namespace {

Variant& current() {
  static Variant v = variant_from(Switches::process());
  return v;
}

}  // namespace

Variant variant() { return current(); }
void set_variant(const Variant& v) { current() = v; }

}  // namespace kintsugi::cuda::attn_tc
