// Mixture-of-experts kernels (backend.hpp, "mixture of experts"; docs/moe.md): the router's
// softmax, top-k and losses with their backward, the permutation of routed rows by expert and
// its gate-weighted inverse, and the shared expert's sigmoid gate. Rows run in parallel; every
// sum over rows or over a row's choices runs in a fixed order, so the results do not depend on
// the thread count.
#include <cmath>
#include <vector>

#include "kintsugi/backend/cpu/convert.hpp"
#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cpu {

namespace {

template <class T>
T moe_sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Rows routed to each expert, counted in order.
void moe_count_experts(const std::int32_t* experts, std::int64_t m, std::int64_t e,
                   std::vector<std::int64_t>& counts) {
  counts.assign(static_cast<std::size_t>(e), 0);
  for (std::int64_t c = 0; c < m; ++c) {
    const std::int32_t x = experts[c];
    KINTSUGI_ASSERT(x >= 0 && x < e);
    ++counts[static_cast<std::size_t>(x)];
  }
}

// Group-limited selection (MoeRouting::groups): keep[i] = whether expert i's group is among the
// topk_groups best, a group's score being its two largest selection scores' sum (its one with
// one expert per group), ranked by score, ties to the lower group.
template <class T>
void moe_keep_groups(const T* select, std::int64_t e, const MoeRouting& rt, T* group_score,
                     char* keep) {
  const std::int64_t size = e / rt.groups;
  for (std::int64_t g = 0; g < rt.groups; ++g) {
    const T* v = select + g * size;
    std::int64_t first = 0;
    for (std::int64_t i = 1; i < size; ++i)
      if (v[i] > v[first]) first = i;
    std::int64_t second = -1;
    for (std::int64_t i = 0; i < size; ++i)
      if (i != first && (second < 0 || v[i] > v[second])) second = i;
    group_score[g] = second < 0 ? v[first] : v[first] + v[second];
  }
  for (std::int64_t g = 0; g < rt.groups; ++g) {
    std::int64_t ahead = 0;
    for (std::int64_t h = 0; h < rt.groups; ++h)
      ahead += group_score[h] > group_score[g] || (group_score[h] == group_score[g] && h < g);
    for (std::int64_t i = 0; i < size; ++i) keep[g * size + i] = ahead < rt.topk_groups;
  }
}

// Per row: the scores (softmax, or each logit's sigmoid with probs keeping the logits), the
// top k by selection score (the score plus the bias, within the kept groups), the gates.
template <class T>
void moe_route_rows(const T* logits, std::int64_t n, std::int64_t e, const MoeRouting& rt,
                    const float* bias, T* probs, T* lse, std::int32_t* experts, T* gates,
                    double* losses) {
  const std::int64_t k = rt.top_k;
#pragma omp parallel
  {
    std::vector<T> score(static_cast<std::size_t>(e)), select(score.size());
    std::vector<T> group_score(static_cast<std::size_t>(rt.groups));
    std::vector<char> keep(score.size(), 1);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const T* l = logits + r * e;
      T* p = probs + r * e;
      T top = l[0];
      for (std::int64_t i = 1; i < e; ++i) top = std::max(top, l[i]);
      T sum = 0;
      for (std::int64_t i = 0; i < e; ++i) sum += std::exp(l[i] - top);
      lse[r] = top + std::log(sum);
      for (std::int64_t i = 0; i < e; ++i) {
        const auto u = static_cast<std::size_t>(i);
        if (rt.sigmoid) {
          score[u] = moe_sigmoid(l[i]);
          p[i] = l[i];
        } else {
          p[i] = std::exp(l[i] - top) / sum;
          score[u] = p[i];
        }
        select[u] = bias ? score[u] + static_cast<T>(bias[i]) : score[u];
      }
      if (rt.groups > 1) moe_keep_groups(select.data(), e, rt, group_score.data(), keep.data());
      // The k largest, each a scan for the largest not taken yet: strict comparison keeps the
      // lowest index among equal selection scores.
      std::int32_t* chosen = experts + r * k;
      T* g = gates + r * k;
      T total = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t best = -1;
        for (std::int64_t i = 0; i < e; ++i) {
          bool taken = !keep[static_cast<std::size_t>(i)];
          for (std::int64_t q = 0; q < j; ++q) taken |= chosen[q] == i;
          if (!taken && (best < 0 || select[static_cast<std::size_t>(i)] >
                                         select[static_cast<std::size_t>(best)]))
            best = i;
        }
        chosen[j] = static_cast<std::int32_t>(best);
        g[j] = score[static_cast<std::size_t>(best)];
        total += g[j];
      }
      if (rt.renormalize)
        for (std::int64_t j = 0; j < k; ++j) g[j] /= total;
      if (rt.scale != 1.0)
        for (std::int64_t j = 0; j < k; ++j) g[j] *= static_cast<T>(rt.scale);
    }
  }
  std::vector<std::int64_t> counts;
  moe_count_experts(experts, n * k, e, counts);
  // Each expert's probabilities (sigmoid: the row's scores over their sum) summed over the
  // rows in order, then the experts in order.
  std::vector<double> column(static_cast<std::size_t>(e), 0.0), row(column.size());
  double z = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    if (rt.sigmoid) {
      double sum = 0;
      for (std::int64_t i = 0; i < e; ++i)
        sum += row[static_cast<std::size_t>(i)] = static_cast<double>(moe_sigmoid(probs[r * e + i]));
      for (std::int64_t i = 0; i < e; ++i)
        column[static_cast<std::size_t>(i)] += row[static_cast<std::size_t>(i)] / sum;
    } else {
      for (std::int64_t i = 0; i < e; ++i) column[static_cast<std::size_t>(i)] += probs[r * e + i];
    }
    z += static_cast<double>(lse[r]) * static_cast<double>(lse[r]);
  }
  double aux = 0;
  for (std::int64_t i = 0; i < e; ++i)
    aux += static_cast<double>(counts[static_cast<std::size_t>(i)]) * column[static_cast<std::size_t>(i)];
  const double rows = static_cast<double>(n);
  losses[0] += aux * static_cast<double>(e) / (rows * rows * static_cast<double>(k));
  losses[1] += z / rows;
}

template <class T>
void moe_route_backward_rows(const T* probs, const T* lse, const std::int32_t* experts, const T* gates,
                    const T* d_gates, std::int64_t n, std::int64_t e, std::int64_t k,
                    const MoeRouting& rt, double aux_scale, double z_scale, T* d_logits) {
  std::vector<std::int64_t> counts;
  moe_count_experts(experts, n * k, e, counts);
  const double rows = static_cast<double>(n);
  // d(aux)/d(probs[r, i]) = E count_i / (N^2 K), the counts held constant.
  std::vector<T> aux(static_cast<std::size_t>(e));
  for (std::int64_t i = 0; i < e; ++i)
    aux[static_cast<std::size_t>(i)] =
        static_cast<T>(aux_scale * static_cast<double>(e) *
                       static_cast<double>(counts[static_cast<std::size_t>(i)]) /
                       (rows * rows * static_cast<double>(k)));
  const T z = static_cast<T>(z_scale * 2.0 / rows);
  const bool scaled = rt.scale != 1.0;
  const T scale = static_cast<T>(rt.scale);
#pragma omp parallel
  {
    std::vector<T> score(rt.sigmoid ? static_cast<std::size_t>(e) : 0);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const T* p = probs + r * e;
      T* d = d_logits + r * e;
      const std::int32_t* chosen = experts + r * k;
      const T* g = gates + r * k;
      const T* dg = d_gates + r * k;
      // The gradient at the scores: the load-balancing term (sigmoid: through the row's
      // normalization s_i / S), then the gates'.
      // Softmax: the scores are p itself; sigmoid: p holds the logits.
      const T* s = p;
      if (rt.sigmoid) {
        T sum = 0, dot = 0;
        for (std::int64_t i = 0; i < e; ++i) {
          score[static_cast<std::size_t>(i)] = moe_sigmoid(p[i]);
          sum += score[static_cast<std::size_t>(i)];
          dot += aux[static_cast<std::size_t>(i)] * score[static_cast<std::size_t>(i)];
        }
        for (std::int64_t i = 0; i < e; ++i) d[i] = (aux[static_cast<std::size_t>(i)] - dot / sum) / sum;
        s = score.data();
      } else {
        for (std::int64_t i = 0; i < e; ++i) d[i] = aux[static_cast<std::size_t>(i)];
      }
      if (rt.renormalize) {
        // g_j = c s_j / S with S the chosen ones' sum: ds_i = (c dg_i - sum_j dg_j g_j) / S.
        T total = 0, dot = 0;
        for (std::int64_t j = 0; j < k; ++j) {
          total += s[chosen[j]];
          dot += dg[j] * g[j];
        }
        for (std::int64_t j = 0; j < k; ++j)
          d[chosen[j]] += ((scaled ? scale * dg[j] : dg[j]) - dot) / total;
      } else {
        for (std::int64_t j = 0; j < k; ++j) d[chosen[j]] += scaled ? scale * dg[j] : dg[j];
      }
      if (rt.sigmoid) {
        // Through the sigmoid, plus the z-loss's gradient: z lse softmax(logits).
        for (std::int64_t i = 0; i < e; ++i)
          d[i] = d[i] * s[i] * (T(1) - s[i]) + z * lse[r] * std::exp(p[i] - lse[r]);
        continue;
      }
      T inner = 0;
      for (std::int64_t i = 0; i < e; ++i) inner += p[i] * d[i];
      for (std::int64_t i = 0; i < e; ++i) d[i] = p[i] * (d[i] - inner) + z * lse[r] * p[i];
    }
  }
}

void moe_dispatch_rows(const std::int32_t* experts, std::int64_t m, std::int64_t e,
                   std::int32_t* order, std::int32_t* position, std::int32_t* counts) {
  std::vector<std::int64_t> count;
  moe_count_experts(experts, m, e, count);
  std::vector<std::int64_t> next(static_cast<std::size_t>(e), 0);
  for (std::int64_t i = 1; i < e; ++i)
    next[static_cast<std::size_t>(i)] =
        next[static_cast<std::size_t>(i - 1)] + count[static_cast<std::size_t>(i - 1)];
  for (std::int64_t i = 0; i < e; ++i)
    counts[i] = static_cast<std::int32_t>(count[static_cast<std::size_t>(i)]);
  for (std::int64_t c = 0; c < m; ++c) {
    const std::int64_t p = next[static_cast<std::size_t>(experts[c])]++;
    order[p] = static_cast<std::int32_t>(c);
    position[c] = static_cast<std::int32_t>(p);
  }
}

template <class T>
void moe_gather_rows(const T* x, const std::int32_t* order, std::int64_t m, std::int64_t k,
            std::int64_t d, T* xp) {
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < m; ++p) {
    const T* src = x + (order[p] / k) * d;
    T* dst = xp + p * d;
    for (std::int64_t i = 0; i < d; ++i) dst[i] = src[i];
  }
}

template <class T>
void moe_combine_rows(const T* src, const std::int32_t* position, const T* weights, std::int64_t n,
             std::int64_t k, std::int64_t d, T* out, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < n; ++r) {
    T* o = out + r * d;
    for (std::int64_t i = 0; i < d; ++i) {
      T sum = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        const T w = weights ? weights[r * k + j] : T(1);
        sum += w * src[position[r * k + j] * d + i];
      }
      o[i] = accumulate ? o[i] + sum : sum;
    }
  }
}

template <class T>
void moe_combine_backward_rows(const T* dy, const T* src, const std::int32_t* order,
                      const std::int32_t* position, const T* weights, std::int64_t n,
                      std::int64_t k, std::int64_t d, T* d_src, T* d_weights) {
  const std::int64_t m = n * k;
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < m; ++p) {
    const std::int64_t c = order[p];
    const T w = weights[c];
    const T* g = dy + (c / k) * d;
    T* out = d_src + p * d;
    for (std::int64_t i = 0; i < d; ++i) out[i] = w * g[i];
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < m; ++c) {
    const T* g = dy + (c / k) * d;
    const T* s = src + static_cast<std::int64_t>(position[c]) * d;
    T dot = 0;
    for (std::int64_t i = 0; i < d; ++i) dot += g[i] * s[i];
    d_weights[c] = dot;
  }
}

template <class T>
void moe_shared_gate_rows(const T* logit, const T* shared, std::int64_t n, std::int64_t d, T* out) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < n; ++r) {
    const T s = moe_sigmoid(logit[r]);
    for (std::int64_t i = 0; i < d; ++i) out[r * d + i] += s * shared[r * d + i];
  }
}

template <class T>
void moe_shared_gate_backward_rows(const T* logit, const T* shared, const T* dy, std::int64_t n,
                          std::int64_t d, T* d_shared, T* d_logit) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < n; ++r) {
    const T s = moe_sigmoid(logit[r]);
    T dot = 0;
    for (std::int64_t i = 0; i < d; ++i) {
      dot += dy[r * d + i] * shared[r * d + i];
      d_shared[r * d + i] = s * dy[r * d + i];
    }
    d_logit[r] = s * (T(1) - s) * dot;
  }
}

const std::int32_t* moe_indices(const Tensor& t) { return t.as<std::int32_t>(); }
std::int32_t* moe_indices_out(const Tensor& t) { return t.as<std::int32_t>(); }

}  // namespace

// Mixed precision (bf16 or f16 activations beside f32 statistics, docs/moe.md "Precision"): the
// f32 kernels on f32 copies, so the arithmetic is the f32 run's and each output rounds once into
// its dtype. The copies are the router's [N, E] and [N, K] tensors and the routed rows, no
// larger than the expert GEMMs' own operands.
template <class Fn>
void CpuBackend::moe_typed(std::initializer_list<MoeTensor> tensors, Fn&& fn) {
  std::vector<const Tensor*> all;
  for (const MoeTensor& t : tensors) all.push_back(t.tensor);
  const Kind kind = kind_of(std::span<const Tensor* const>(all));
  if (kind != Kind::mixed) {
    typed(kind, [&]<class T>() { fn.template operator()<T>([](const Tensor& t) { return t; }); });
    return;
  }
  // One get() for every copy (a GrowBuffer loses its contents when it grows), each 64-byte
  // aligned.
  auto padded = [](std::int64_t n) { return (static_cast<std::size_t>(n) * 4 + 63) / 64 * 64; };
  std::size_t bytes = 0;
  for (const MoeTensor& t : tensors)
    if (t.tensor && t.tensor->dtype != DType::f32) bytes += padded(t.tensor->numel());
  std::byte* next = moe_staging_.get(bytes);
  std::vector<std::pair<const Tensor*, Tensor>> copies;
  for (const MoeTensor& t : tensors) {
    if (!t.tensor || t.tensor->dtype == DType::f32) continue;
    const Tensor& from = *t.tensor;
    Tensor copy{next, DType::f32, from.shape, from.device};
    next += padded(from.numel());
    if (t.use != Use::out) widen(static_cast<const std::uint16_t*>(from.data), from.dtype,
                                 copy.as<float>(), from.numel());
    copies.emplace_back(&from, copy);
  }
  auto view = [&](const Tensor& t) {
    for (const auto& [from, copy] : copies)
      if (from == &t) return copy;
    return t;
  };
  fn.template operator()<float>(view);
  for (const MoeTensor& t : tensors) {
    if (!t.tensor || t.tensor->dtype == DType::f32 || t.use == Use::in) continue;
    const Tensor copy = view(*t.tensor);
    narrow(copy.as<float>(), t.tensor->dtype, static_cast<std::uint16_t*>(t.tensor->data),
           t.tensor->numel());
  }
}

// ---- CpuBackend's overrides (cpu_backend.hpp): check the element types, then call a kernel

void CpuBackend::do_moe_route(const Tensor& logits, const MoeRouting& routing,
                              const Tensor* bias, const Tensor& probs, const Tensor& lse,
                              const Tensor& experts, const Tensor& gates, const Tensor& losses) {
  const std::int64_t n = rows_of(logits), e = cols_of(logits);
  const float* b = bias ? bias->as<float>() : nullptr;
  moe_typed({{&logits, Use::in}, {&probs, Use::out}, {&lse, Use::out}, {&gates, Use::out}},
            [&]<class T>(auto view) {
              moe_route_rows(view(logits).template as<T>(), n, e, routing, b,
                             view(probs).template as<T>(), view(lse).template as<T>(),
                             moe_indices_out(experts), view(gates).template as<T>(),
                             losses.as<double>());
            });
}

void CpuBackend::do_moe_route_backward(const Tensor& probs, const Tensor& lse,
                                       const Tensor& experts, const Tensor& gates,
                                       const Tensor& d_gates, const MoeRouting& routing,
                                       double aux_scale, double z_scale, const Tensor& d_logits) {
  const std::int64_t n = rows_of(probs), e = cols_of(probs), k = experts.numel() / n;
  moe_typed({{&probs, Use::in}, {&lse, Use::in}, {&gates, Use::in}, {&d_gates, Use::in},
             {&d_logits, Use::out}},
            [&]<class T>(auto view) {
              moe_route_backward_rows(view(probs).template as<T>(), view(lse).template as<T>(),
                                      moe_indices(experts), view(gates).template as<T>(),
                                      view(d_gates).template as<T>(), n, e, k, routing,
                                      aux_scale, z_scale, view(d_logits).template as<T>());
            });
}

void CpuBackend::do_moe_dispatch(const Tensor& experts, const Tensor& order,
                                 const Tensor& position, const Tensor& counts) {
  moe_dispatch_rows(moe_indices(experts), experts.numel(), counts.numel(), moe_indices_out(order),
                moe_indices_out(position), moe_indices_out(counts));
}

void CpuBackend::do_moe_gather(const Tensor& x, const Tensor& order, const Tensor& xp) {
  const std::int64_t m = rows_of(xp), k = m / rows_of(x);
  moe_typed({{&x, Use::in}, {&xp, Use::out}}, [&]<class T>(auto view) {
    moe_gather_rows(view(x).template as<T>(), moe_indices(order), m, k, cols_of(x),
                    view(xp).template as<T>());
  });
}

void CpuBackend::do_moe_combine(const Tensor& src, const Tensor& position, const Tensor* weights,
                                const Tensor& out, bool accumulate) {
  const std::int64_t n = rows_of(out), k = rows_of(src) / n;
  moe_typed({{&src, Use::in}, {weights, Use::in}, {&out, accumulate ? Use::in_out : Use::out}},
            [&]<class T>(auto view) {
              moe_combine_rows(view(src).template as<T>(), moe_indices(position),
                               weights ? view(*weights).template as<T>() : nullptr, n, k,
                               cols_of(out), view(out).template as<T>(), accumulate);
            });
}

void CpuBackend::do_moe_combine_backward(const Tensor& dy, const Tensor& src, const Tensor& order,
                                         const Tensor& position, const Tensor& weights,
                                         const Tensor& d_src, const Tensor& d_weights) {
  const std::int64_t n = rows_of(dy), k = rows_of(src) / n;
  moe_typed({{&dy, Use::in}, {&src, Use::in}, {&weights, Use::in}, {&d_src, Use::out},
             {&d_weights, Use::out}},
            [&]<class T>(auto view) {
              moe_combine_backward_rows(view(dy).template as<T>(), view(src).template as<T>(),
                                        moe_indices(order), moe_indices(position),
                                        view(weights).template as<T>(), n, k, cols_of(dy),
                                        view(d_src).template as<T>(),
                                        view(d_weights).template as<T>());
            });
}

void CpuBackend::do_moe_shared_gate(const Tensor& logit, const Tensor& shared,
                                    const Tensor& out) {
  moe_typed({{&logit, Use::in}, {&shared, Use::in}, {&out, Use::in_out}},
            [&]<class T>(auto view) {
              moe_shared_gate_rows(view(logit).template as<T>(), view(shared).template as<T>(),
                                   rows_of(out), cols_of(out), view(out).template as<T>());
            });
}

void CpuBackend::do_moe_shared_gate_backward(const Tensor& logit, const Tensor& shared,
                                             const Tensor& dy, const Tensor& d_shared,
                                             const Tensor& d_logit) {
  moe_typed({{&logit, Use::in}, {&shared, Use::in}, {&dy, Use::in}, {&d_shared, Use::out},
             {&d_logit, Use::out}},
            [&]<class T>(auto view) {
              moe_shared_gate_backward_rows(view(logit).template as<T>(),
                                            view(shared).template as<T>(),
                                            view(dy).template as<T>(), rows_of(dy), cols_of(dy),
                                            view(d_shared).template as<T>(),
                                            view(d_logit).template as<T>());
            });
}

}  // namespace kintsugi::cpu
