#pragma once
// A Backend that passes every op to another backend through one hook, around(): the base of
// backends that observe ops (ProfilingBackend times them; tests guard device memory with it).
// Each op names itself and, for GEMM-like ops, its FLOPs.
#include <functional>
#include <string>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner);

  std::string_view name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  std::string hardware() const override { return inner_.hardware(); }
  Allocator& allocator() override { return inner_.allocator(); }
  void synchronize() override { inner_.synchronize(); }
  DeviceTimeline* timeline() override { return inner_.timeline(); }
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
  void attention_decode(const AttentionShape& s, const Tensor& cache, std::int64_t position,
                        const Tensor& out) override;
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& out,
                         std::int64_t vocab_begin) override;
  void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                          bool accumulate, std::int64_t vocab_begin) override;
  void position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                  std::int64_t first_row) override;
  void position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                   bool accumulate, std::int64_t first_row) override;
  void softmax_row_max(const Tensor& logits, std::int64_t valid, const Tensor& row_max) override;
  void softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                       const Tensor& targets, std::int64_t col_begin,
                       const Tensor& row_sum, const Tensor& target_logit,
                       bool store_exp) override;
  void cross_entropy_finish(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                            const Tensor& row_sum, const Tensor& target_logit,
                            const Tensor& targets, std::int64_t col_begin, const Tensor& loss_sum,
                            bool backward, double grad_scale) override;
  void cross_entropy_fused(const Tensor& logits, std::int64_t valid, const Tensor& targets,
                           const Tensor& loss_sum, bool backward, double grad_scale) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void add_bias(const Tensor& x, const Tensor& bias) override;
  void scale(const Tensor& x, double factor) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void convert(const Tensor& src, const Tensor& dst) override;
  void zero(const Tensor& x) override;
  void sum_squares(const Tensor& x, const Tensor& sum) override;
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h, const Tensor* working_copy) override;

 protected:
  // Runs one op of the inner backend (run()); `flops` counts GEMM-like ops' multiply-adds x 2.
  virtual void around(const char* op, double flops, const std::function<void()>& run) { run(); }
  Backend& inner() { return inner_; }

 private:
  Backend& inner_;
};

}  // namespace kintsugi
