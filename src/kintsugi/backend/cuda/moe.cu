// Mixture-of-experts kernels (backend.hpp, "mixture of experts"; docs/moe.md): the router's
// softmax, top-k and losses with their backward, the counting sort of routed rows by expert, the
// permutation and its gate-weighted inverse, and the shared expert's sigmoid gate. The contract
// is backend/cpu/moe.cpp's, sum for sum in the same order: a row's softmax, top-k and dot
// products in one thread; an expert's count and probability column in one thread, rows in
// order; the losses and the dispatch's offsets in one thread, experts in order. No atomics, so
// the same inputs give the same bits on every run. These are plain CUDA-core kernels: the
// router's E and the routed rows' width are small beside the expert GEMMs they feed.
#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

namespace {

// The counting sort of the M choices by expert runs over tiles of kTile choices, one block per
// tile and one thread per expert, each scanning its tile in order: E x M comparisons spread over
// M / kTile blocks (one thread per expert walking all M choices took M steps in a row: about
// 150 us at Qwen3-30B-A3B's 8192 rows x top 8, several times per layer). Integer counts, no
// atomics: the same bits every run.
constexpr std::int64_t kTile = 1024;
std::int64_t tiles_of(std::int64_t m) { return (m + kTile - 1) / kTile; }

// tile_counts[b, x]: choices of tile b routed to expert x.
__global__ void moe_tile_count_kernel(const std::int32_t* experts, std::int64_t m, std::int64_t e,
                                      std::int64_t* tile_counts) {
  const std::int64_t b = blockIdx.x, begin = b * kTile, end = min(m, begin + kTile);
  for (std::int64_t x = threadIdx.x; x < e; x += blockDim.x) {
    std::int64_t n = 0;
    for (std::int64_t c = begin; c < end; ++c) n += experts[c] == x;
    tile_counts[b * e + x] = n;
  }
}

// One thread per expert: its count, the tiles summed in order.
__global__ void moe_tile_total_kernel(const std::int64_t* tile_counts, std::int64_t tiles,
                                      std::int64_t e, std::int64_t* counts) {
  for (std::int64_t x = global_index(); x < e; x += global_stride()) {
    std::int64_t n = 0;
    for (std::int64_t b = 0; b < tiles; ++b) n += tile_counts[b * e + x];
    counts[x] = n;
  }
}

// Scratch carved for the tiles' counts and first slots (i64 [tiles, E] each), the experts'
// counts (i64 [E]) and their columns or first slots (8 bytes [E]).
struct MoeScratch {
  std::int64_t* tile_counts;
  std::int64_t* tile_first;
  std::int64_t* counts;
  void* per_expert;
};
// The caller sized scratch with moe_scratch_bytes(e, m).
MoeScratch carve(Scratch scratch, std::int64_t e, std::int64_t m) {
  auto* base = static_cast<std::int64_t*>(scratch.data);
  const std::int64_t t = tiles_of(m) * e;
  return {base, base + t, base + 2 * t, base + 2 * t + e};
}

void count_experts(const std::int32_t* experts, std::int64_t m, std::int64_t e,
                   const MoeScratch& s, cudaStream_t stream) {
  const std::int64_t tiles = tiles_of(m);
  if (tiles > 0) {
    KINTSUGI_CUDA_LAUNCH(moe_tile_count_kernel, static_cast<unsigned>(tiles), kThreads, 0, stream,
                         experts, m, e, s.tile_counts);
    check_launch("moe_tile_count_kernel", stream);
  }
  KINTSUGI_CUDA_LAUNCH(moe_tile_total_kernel, grid_for(e), kThreads, 0, stream, s.tile_counts,
                       tiles, e, s.counts);
  check_launch("moe_tile_total_kernel", stream);
}

template <class Acc>
__device__ __forceinline__ Acc moe_sigmoid(Acc x) {
  return Acc(1) / (Acc(1) + exp_acc(-x));
}

// The most groups of group-limited routing (a row's kept groups are a 64-bit mask; validated
// in model/config.cpp).
constexpr std::int64_t kMaxGroups = 64;

// One thread per row: the scores (softmax as stored, or each logit's sigmoid with probs keeping
// the logits), log-sum-exp, the kept groups (MoeRouting::groups: a group's two best selection
// scores summed, the topk_groups best, ties to the lower group), the top k by selection score
// (score plus bias; a scan for the largest not taken yet: ties to the lower index), the gates,
// renormalized or not, times the scale.
template <class Acc>
__global__ void moe_route_rows_kernel(Ref logits, std::int64_t n, std::int64_t e, MoeRouting rt,
                                      const float* bias, Ref probs, Ref lse,
                                      std::int32_t* experts, Ref gates) {
  const std::int64_t k = rt.top_k;
  for (std::int64_t r = global_index(); r < n; r += global_stride()) {
    Acc top = load<Acc>(logits, r * e);
    for (std::int64_t i = 1; i < e; ++i) top = max(top, load<Acc>(logits, r * e + i));
    Acc sum = 0;
    for (std::int64_t i = 0; i < e; ++i) sum += exp_acc(load<Acc>(logits, r * e + i) - top);
    store(lse, r, top + log_acc(sum));
    // The probabilities as stored: the top-k compares what backward will read.
    for (std::int64_t i = 0; i < e; ++i)
      store(probs, r * e + i,
            rt.sigmoid ? load<Acc>(logits, r * e + i)
                       : exp_acc(load<Acc>(logits, r * e + i) - top) / sum);
    auto score = [&](std::int64_t i) {
      return rt.sigmoid ? moe_sigmoid(load<Acc>(logits, r * e + i)) : load<Acc>(probs, r * e + i);
    };
    auto select = [&](std::int64_t i) {
      return bias ? score(i) + static_cast<Acc>(bias[i]) : score(i);
    };
    std::uint64_t kept = ~std::uint64_t{0};
    const std::int64_t size = e / rt.groups;
    if (rt.groups > 1) {
      Acc group_score[kMaxGroups];
      for (std::int64_t g = 0; g < rt.groups; ++g) {
        std::int64_t first = 0, second = -1;
        for (std::int64_t i = 1; i < size; ++i)
          if (select(g * size + i) > select(g * size + first)) first = i;
        for (std::int64_t i = 0; i < size; ++i)
          if (i != first && (second < 0 || select(g * size + i) > select(g * size + second)))
            second = i;
        group_score[g] = second < 0 ? select(g * size + first)
                                    : select(g * size + first) + select(g * size + second);
      }
      kept = 0;
      for (std::int64_t g = 0; g < rt.groups; ++g) {
        std::int64_t ahead = 0;
        for (std::int64_t h = 0; h < rt.groups; ++h)
          ahead += group_score[h] > group_score[g] || (group_score[h] == group_score[g] && h < g);
        if (ahead < rt.topk_groups) kept |= std::uint64_t{1} << g;
      }
    }
    std::int32_t* chosen = experts + r * k;
    Acc total = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t best = -1;
      Acc best_p = 0;
      for (std::int64_t i = 0; i < e; ++i) {
        bool taken = rt.groups > 1 && !((kept >> (i / size)) & 1);
        for (std::int64_t q = 0; q < j; ++q) taken |= chosen[q] == i;
        const Acc p = select(i);
        if (!taken && (best < 0 || p > best_p)) {
          best = i;
          best_p = p;
        }
      }
      chosen[j] = static_cast<std::int32_t>(best);
      const Acc gate = bias ? score(best) : best_p;
      store(gates, r * k + j, gate);
      total += gate;
    }
    for (std::int64_t j = 0; j < k; ++j) {
      Acc g = load<Acc>(gates, r * k + j);
      if (rt.renormalize) g /= total;
      if (rt.scale != 1.0) g *= static_cast<Acc>(rt.scale);
      if (rt.renormalize || rt.scale != 1.0) store(gates, r * k + j, g);
    }
  }
}

// One thread per expert: its probability column summed over the rows in order (f64); with the
// sigmoid (probs holding the logits), each row's scores over the row's sum.
__global__ void moe_column_kernel(Ref probs, std::int64_t n, std::int64_t e, bool sigmoid,
                                  double* column) {
  for (std::int64_t x = global_index(); x < e; x += global_stride()) {
    double sum = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      if (!sigmoid) {
        sum += load<double>(probs, r * e + x);
        continue;
      }
      // The scores in the router's arithmetic (f32 unless every tensor is f64), in double.
      auto s = [&](std::int64_t i) {
        return probs.dtype == DType::f64
                   ? moe_sigmoid(load<double>(probs, r * e + i))
                   : static_cast<double>(moe_sigmoid(load<float>(probs, r * e + i)));
      };
      double row = 0;
      for (std::int64_t i = 0; i < e; ++i) row += s(i);
      sum += s(x) / row;
    }
    column[x] = sum;
  }
}

// One thread: the load-balancing and z losses added to losses[0] and losses[1] (f64).
__global__ void moe_losses_kernel(const std::int64_t* counts, const double* column, Ref lse,
                                  std::int64_t n, std::int64_t e, std::int64_t k, double* losses) {
  if (global_index() != 0) return;
  double z = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    const double l = load<double>(lse, r);
    z += l * l;
  }
  double aux = 0;
  for (std::int64_t x = 0; x < e; ++x) aux += static_cast<double>(counts[x]) * column[x];
  const double rows = static_cast<double>(n);
  losses[0] += aux * static_cast<double>(e) / (rows * rows * static_cast<double>(k));
  losses[1] += z / rows;
}

// One thread per row: the gradient at the scores (the load-balancing term with the counts held,
// through the row's normalization with the sigmoid; the gates' own through the scale and the
// renormalization), then through the softmax or the sigmoid, plus the z-loss's.
template <class Acc>
__global__ void moe_route_backward_kernel(Ref probs, Ref lse, const std::int32_t* experts,
                                          Ref gates, Ref d_gates, const std::int64_t* counts,
                                          std::int64_t n, std::int64_t e, std::int64_t k,
                                          MoeRouting rt, double aux_scale, double z_scale,
                                          Ref d_logits) {
  const double rows = static_cast<double>(n);
  const Acc z = static_cast<Acc>(z_scale * 2.0 / rows);
  const bool scaled = rt.scale != 1.0;
  const Acc scale = static_cast<Acc>(rt.scale);
  for (std::int64_t r = global_index(); r < n; r += global_stride()) {
    const std::int32_t* chosen = experts + r * k;
    auto aux = [&](std::int64_t i) {
      return static_cast<Acc>(aux_scale * static_cast<double>(e) *
                              static_cast<double>(counts[i]) /
                              (rows * rows * static_cast<double>(k)));
    };
    auto score = [&](std::int64_t i) {
      return rt.sigmoid ? moe_sigmoid(load<Acc>(probs, r * e + i)) : load<Acc>(probs, r * e + i);
    };
    // Sigmoid: the scores' sum and the load-balancing term's dot product with them.
    Acc row_sum = 0, aux_dot = 0;
    if (rt.sigmoid)
      for (std::int64_t i = 0; i < e; ++i) {
        row_sum += score(i);
        aux_dot += aux(i) * score(i);
      }
    // d at score i: the load-balancing term and, for a chosen expert, its gate's (the choices
    // are distinct: at most one j names i). Kept in registers, so a 16-bit d_logits rounds
    // once, as the CPU's does.
    Acc total = 0, dot = 0;
    if (rt.renormalize)
      for (std::int64_t j = 0; j < k; ++j) {
        total += score(chosen[j]);
        dot += load<Acc>(d_gates, r * k + j) * load<Acc>(gates, r * k + j);
      }
    auto d_prob = [&](std::int64_t i) {
      Acc d = rt.sigmoid ? (aux(i) - aux_dot / row_sum) / row_sum : aux(i);
      for (std::int64_t j = 0; j < k; ++j)
        if (chosen[j] == i) {
          const Acc dg = scaled ? scale * load<Acc>(d_gates, r * k + j)
                                : load<Acc>(d_gates, r * k + j);
          d += rt.renormalize ? (dg - dot) / total : dg;
        }
      return d;
    };
    const Acc l = load<Acc>(lse, r);
    if (rt.sigmoid) {
      for (std::int64_t i = 0; i < e; ++i) {
        const Acc s = score(i);
        store(d_logits, r * e + i,
              d_prob(i) * s * (Acc(1) - s) + z * l * exp_acc(load<Acc>(probs, r * e + i) - l));
      }
      continue;
    }
    Acc inner = 0;
    for (std::int64_t i = 0; i < e; ++i) inner += load<Acc>(probs, r * e + i) * d_prob(i);
    for (std::int64_t i = 0; i < e; ++i) {
      const Acc p = load<Acc>(probs, r * e + i);
      store(d_logits, r * e + i, p * (d_prob(i) - inner) + z * l * p);
    }
  }
}

// One thread: each expert's first slot in the order (a prefix sum in expert order).
__global__ void moe_offsets_kernel(const std::int64_t* counts, std::int64_t e,
                                   std::int64_t* first, std::int32_t* counts_out) {
  if (global_index() != 0) return;
  std::int64_t next = 0;
  for (std::int64_t x = 0; x < e; ++x) {
    first[x] = next;
    next += counts[x];
    counts_out[x] = static_cast<std::int32_t>(counts[x]);
  }
}

// One thread per expert: the first slot of each tile's run of its choices, tiles in order.
__global__ void moe_tile_first_kernel(const std::int64_t* tile_counts, const std::int64_t* first,
                                      std::int64_t tiles, std::int64_t e,
                                      std::int64_t* tile_first) {
  for (std::int64_t x = global_index(); x < e; x += global_stride()) {
    std::int64_t next = first[x];
    for (std::int64_t b = 0; b < tiles; ++b) {
      tile_first[b * e + x] = next;
      next += tile_counts[b * e + x];
    }
  }
}

// Block b, one thread per expert: the tile's choices of that expert in order, each given the
// next slot of its run.
__global__ void moe_dispatch_kernel(const std::int32_t* experts, std::int64_t m, std::int64_t e,
                                    const std::int64_t* tile_first, std::int32_t* order,
                                    std::int32_t* position) {
  const std::int64_t b = blockIdx.x, begin = b * kTile, end = min(m, begin + kTile);
  for (std::int64_t x = threadIdx.x; x < e; x += blockDim.x) {
    std::int64_t p = tile_first[b * e + x];
    for (std::int64_t c = begin; c < end; ++c) {
      if (experts[c] != x) continue;
      order[p] = static_cast<std::int32_t>(c);
      position[c] = static_cast<std::int32_t>(p);
      ++p;
    }
  }
}

// One thread per element of the routed rows: xp[p] = x[order[p] / k].
template <class Acc>
__global__ void moe_gather_kernel(Ref x, const std::int32_t* order, std::int64_t m,
                                  std::int64_t k, std::int64_t d, Ref xp) {
  for (std::int64_t idx = global_index(); idx < m * d; idx += global_stride()) {
    const std::int64_t p = idx / d, i = idx % d;
    store(xp, idx, load<Acc>(x, (order[p] / k) * d + i));
  }
}

// One thread per element of the output: out[r] (+)= sum_j w[r, j] src[position[r, j]], j in
// order.
template <class Acc>
__global__ void moe_combine_kernel(Ref src, const std::int32_t* position, Ref weights,
                                   std::int64_t n, std::int64_t k, std::int64_t d, Ref out,
                                   bool accumulate) {
  for (std::int64_t idx = global_index(); idx < n * d; idx += global_stride()) {
    const std::int64_t r = idx / d, i = idx % d;
    Acc sum = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      const Acc w = weights.data ? load<Acc>(weights, r * k + j) : Acc(1);
      sum += w * load<Acc>(src, static_cast<std::int64_t>(position[r * k + j]) * d + i);
    }
    store(out, idx, accumulate ? load<Acc>(out, idx) + sum : sum);
  }
}

// d_src[p] = weights[order[p]] dy[order[p] / k], one thread per element.
template <class Acc>
__global__ void moe_combine_d_src_kernel(Ref dy, const std::int32_t* order, Ref weights,
                                         std::int64_t m, std::int64_t k, std::int64_t d,
                                         Ref d_src) {
  for (std::int64_t idx = global_index(); idx < m * d; idx += global_stride()) {
    const std::int64_t p = idx / d, i = idx % d, c = order[p];
    store(d_src, idx, load<Acc>(weights, c) * load<Acc>(dy, (c / k) * d + i));
  }
}

// d_weights[c] = dy[c / k] . src[position[c]], one thread per choice, columns in order.
template <class Acc>
__global__ void moe_combine_d_weights_kernel(Ref dy, Ref src, const std::int32_t* position,
                                             std::int64_t m, std::int64_t k, std::int64_t d,
                                             Ref d_weights) {
  for (std::int64_t c = global_index(); c < m; c += global_stride()) {
    const std::int64_t s = static_cast<std::int64_t>(position[c]) * d, g = (c / k) * d;
    Acc dot = 0;
    for (std::int64_t i = 0; i < d; ++i) dot += load<Acc>(dy, g + i) * load<Acc>(src, s + i);
    store(d_weights, c, dot);
  }
}

// out[r] += sigmoid(logit[r]) shared[r], one thread per element.
template <class Acc>
__global__ void moe_shared_gate_kernel(Ref logit, Ref shared, std::int64_t n, std::int64_t d,
                                       Ref out) {
  for (std::int64_t idx = global_index(); idx < n * d; idx += global_stride()) {
    const Acc s = moe_sigmoid(load<Acc>(logit, idx / d));
    store(out, idx, load<Acc>(out, idx) + s * load<Acc>(shared, idx));
  }
}

// One thread per row: d_shared = s dy and d_logit = s (1 - s) (dy . shared), columns in order.
template <class Acc>
__global__ void moe_shared_gate_backward_kernel(Ref logit, Ref shared, Ref dy, std::int64_t n,
                                                std::int64_t d, Ref d_shared, Ref d_logit) {
  for (std::int64_t r = global_index(); r < n; r += global_stride()) {
    const Acc s = moe_sigmoid(load<Acc>(logit, r));
    Acc dot = 0;
    for (std::int64_t i = 0; i < d; ++i) {
      const Acc g = load<Acc>(dy, r * d + i);
      dot += g * load<Acc>(shared, r * d + i);
      store(d_shared, r * d + i, s * g);
    }
    store(d_logit, r, s * (Acc(1) - s) * dot);
  }
}

}  // namespace

std::size_t moe_scratch_bytes(std::int64_t experts, std::int64_t choices) {
  return static_cast<std::size_t>(2 * tiles_of(choices) * experts + 2 * experts) *
         sizeof(std::int64_t);
}

void moe_route(Ref logits, std::int64_t n, std::int64_t e, const MoeRouting& routing,
               const float* bias, Ref probs, Ref lse, std::int32_t* experts, Ref gates,
               double* losses, Scratch scratch, cudaStream_t stream) {
  if (n <= 0) return;
  const std::int64_t k = routing.top_k;
  const MoeScratch s = carve(scratch, e, n * k);
  with_acc({logits, probs, lse, gates}, [&](auto acc) {
    auto* rows = moe_route_rows_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(rows, grid_for(n), kThreads, 0, stream, logits, n, e, routing, bias,
                         probs, lse, experts, gates);
    check_launch("moe_route_rows_kernel", stream);
  });
  auto* column = static_cast<double*>(s.per_expert);
  KINTSUGI_CUDA_LAUNCH(moe_column_kernel, grid_for(e), kThreads, 0, stream, probs, n, e,
                       routing.sigmoid, column);
  check_launch("moe_column_kernel", stream);
  count_experts(experts, n * k, e, s, stream);
  KINTSUGI_CUDA_LAUNCH(moe_losses_kernel, 1, 1, 0, stream, s.counts, column, lse, n, e, k, losses);
  check_launch("moe_losses_kernel", stream);
}

void moe_route_backward(Ref probs, Ref lse, const std::int32_t* experts, Ref gates, Ref d_gates,
                        std::int64_t n, std::int64_t e, std::int64_t k, const MoeRouting& routing,
                        double aux_scale, double z_scale, Ref d_logits, Scratch scratch,
                        cudaStream_t stream) {
  if (n <= 0) return;
  const MoeScratch s = carve(scratch, e, n * k);
  count_experts(experts, n * k, e, s, stream);
  with_acc({probs, lse, gates, d_gates, d_logits}, [&](auto acc) {
    auto* kernel = moe_route_backward_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(kernel, grid_for(n), kThreads, 0, stream, probs, lse, experts, gates,
                         d_gates, s.counts, n, e, k, routing, aux_scale, z_scale, d_logits);
    check_launch("moe_route_backward_kernel", stream);
  });
}

void moe_dispatch(const std::int32_t* experts, std::int64_t m, std::int64_t e,
                  std::int32_t* order, std::int32_t* position, std::int32_t* counts,
                  Scratch scratch, cudaStream_t stream) {
  const MoeScratch s = carve(scratch, e, m);
  count_experts(experts, m, e, s, stream);
  auto* first = static_cast<std::int64_t*>(s.per_expert);
  KINTSUGI_CUDA_LAUNCH(moe_offsets_kernel, 1, 1, 0, stream, s.counts, e, first, counts);
  check_launch("moe_offsets_kernel", stream);
  if (m <= 0) return;
  const std::int64_t tiles = tiles_of(m);
  KINTSUGI_CUDA_LAUNCH(moe_tile_first_kernel, grid_for(e), kThreads, 0, stream, s.tile_counts,
                       first, tiles, e, s.tile_first);
  check_launch("moe_tile_first_kernel", stream);
  KINTSUGI_CUDA_LAUNCH(moe_dispatch_kernel, static_cast<unsigned>(tiles), kThreads, 0, stream,
                       experts, m, e, s.tile_first, order, position);
  check_launch("moe_dispatch_kernel", stream);
}

void moe_gather(Ref x, const std::int32_t* order, std::int64_t m, std::int64_t k, std::int64_t d,
                Ref xp, cudaStream_t stream) {
  if (m * d <= 0) return;
  with_acc({x, xp}, [&](auto acc) {
    auto* kernel = moe_gather_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(kernel, grid_for(m * d), kThreads, 0, stream, x, order, m, k, d, xp);
    check_launch("moe_gather_kernel", stream);
  });
}

void moe_combine(Ref src, const std::int32_t* position, Ref weights, std::int64_t n,
                 std::int64_t k, std::int64_t d, Ref out, bool accumulate, cudaStream_t stream) {
  if (n * d <= 0) return;
  with_acc({src, weights, out}, [&](auto acc) {
    auto* kernel = moe_combine_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(kernel, grid_for(n * d), kThreads, 0, stream, src, position, weights, n,
                         k, d, out, accumulate);
    check_launch("moe_combine_kernel", stream);
  });
}

void moe_combine_backward(Ref dy, Ref src, const std::int32_t* order, const std::int32_t* position,
                          Ref weights, std::int64_t n, std::int64_t k, std::int64_t d, Ref d_src,
                          Ref d_weights, cudaStream_t stream) {
  const std::int64_t m = n * k;
  if (m <= 0) return;
  with_acc({dy, src, weights, d_src, d_weights}, [&](auto acc) {
    auto* rows = moe_combine_d_src_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(rows, grid_for(m * d), kThreads, 0, stream, dy, order, weights, m, k, d,
                         d_src);
    check_launch("moe_combine_d_src_kernel", stream);
    auto* dots = moe_combine_d_weights_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(dots, grid_for(m), kThreads, 0, stream, dy, src, position, m, k, d,
                         d_weights);
    check_launch("moe_combine_d_weights_kernel", stream);
  });
}

void moe_shared_gate(Ref logit, Ref shared, std::int64_t n, std::int64_t d, Ref out,
                     cudaStream_t stream) {
  if (n * d <= 0) return;
  with_acc({logit, shared, out}, [&](auto acc) {
    auto* kernel = moe_shared_gate_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(kernel, grid_for(n * d), kThreads, 0, stream, logit, shared, n, d, out);
    check_launch("moe_shared_gate_kernel", stream);
  });
}

void moe_shared_gate_backward(Ref logit, Ref shared, Ref dy, std::int64_t n, std::int64_t d,
                              Ref d_shared, Ref d_logit, cudaStream_t stream) {
  if (n <= 0) return;
  with_acc({logit, shared, dy, d_shared, d_logit}, [&](auto acc) {
    auto* kernel = moe_shared_gate_backward_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(kernel, grid_for(n), kThreads, 0, stream, logit, shared, dy, n, d,
                         d_shared, d_logit);
    check_launch("moe_shared_gate_backward_kernel", stream);
  });
}

}  // namespace kintsugi::cuda
