#pragma once
// A Backend that times every op of another backend: where a training step spends its time,
// per op kind, with the GEMM rate of the linear layers. Used by `kintsugi bench step --profile`.
#include <map>
#include <string>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

struct OpProfile {
  std::int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // for GEMM-based ops: 2 * m * n * k summed
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner);
  const std::map<std::string, OpProfile>& profile() const { return profile_; }
  void reset() { profile_.clear(); }

  std::string_view name() const override { return inner_.name(); }
  Buffer allocate(MemoryKind kind, std::size_t bytes) override {
    return inner_.allocate(kind, bytes);
  }
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                      bool accumulate) override;
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                             bool accumulate) override;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor* db, bool accumulate) override;
  void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd, double eps) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                          const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                          const Tensor& db, bool accumulate) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                       double eps) override;
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, bool accumulate) override;
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) override;
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                       const Tensor& dgate, const Tensor& dup) override;
  void rope(const AttentionShape& s, const Tensor& qkv, double theta, bool inverse) override;
  void gelu_forward(const Tensor& x, const Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override;
  void attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                         const Tensor& lse) override;
  void attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dqkv) override;
  void embedding_forward(const std::int32_t* tokens, const Tensor& wte, const Tensor& out,
                         std::int64_t vocab_begin) override;
  void embedding_backward(const std::int32_t* tokens, const Tensor& dout, const Tensor& dwte,
                          bool accumulate, std::int64_t vocab_begin) override;
  void position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                  std::int64_t first_row) override;
  void position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                   bool accumulate, std::int64_t first_row) override;
  void softmax_row_max(const Tensor& logits, std::int64_t valid, const Tensor& row_max) override;
  void softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                       const std::int32_t* targets, std::int64_t col_begin,
                       const Tensor& row_sum, const Tensor& target_logit,
                       bool store_exp) override;
  void cross_entropy_finish(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                            const Tensor& row_sum, const Tensor& target_logit,
                            const std::int32_t* targets, std::int64_t col_begin, double* losses,
                            bool backward, double grad_scale) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void add_bias(const Tensor& x, const Tensor& bias) override;
  void scale(const Tensor& x, double factor) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void convert(const Tensor& src, const Tensor& dst) override;
  void zero(const Tensor& x) override;
  double sum_squares(const Tensor& x) override;
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h, const Tensor* working_copy) override;

 private:
  template <class Fn>
  auto timed(const char* op, double flops, Fn&& fn);

  Backend& inner_;
  std::map<std::string, OpProfile> profile_;
};

}  // namespace kintsugi
