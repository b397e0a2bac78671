#pragma once
// A Backend that passes every op to another backend through one hook, around(): the base of
// backends that observe ops (ProfilingBackend times them; tests guard device memory with it).
// Each call describes itself (OpCall): its kind, its FLOPs, the bytes it must move and its shape.
#include <functional>
#include <string>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

// One call of an op as an observer sees it: what it must at least compute and move (a roofline's
// two floors), and the dimensions that tell its calls of different shapes apart.
struct OpCall {
  const char* name = "";  // the op's kind, e.g. "linear_forward"; ops sharing one add up under it
  double flops = 0;       // GEMM-like ops: 2 x multiply-adds (attention: its model FLOPs)
  // The least traffic to memory: each tensor it reads read once, each it writes written once,
  // at the tensors' own element types (an output it accumulates into is read too; a gather
  // counts the rows it reads). 0: not counted.
  double bytes = 0;
  // Linear ops: the layer's M x N x K (rows x out x in, the forward's, so a layer's three GEMMs
  // share it); attention and RoPE: batch x seq x heads x head_dim; other ops: their main tensor
  // as rows x columns (its only dimension when it has one). Rank 0: not given.
  Shape dims;
  DType dtype = DType::f32;  // the main operand's element type
};

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
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& pre,
                           const Tensor& y) override;
  void linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                  const Tensor& dx) override;
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
  void sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) override;
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h, const Tensor* working_copy) override;
  void adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) override;
  void lion_step(const Tensor& param, const Tensor& grad, const Tensor& m, const LionHyper& h,
                 const Tensor* working_copy) override;

 protected:
  // Runs one op of the inner backend (run()), described by `call`.
  virtual void around(const OpCall& call, const std::function<void()>& run) { run(); }
  // An op that names only its kind and FLOPs.
  void around(const char* op, double flops, const std::function<void()>& run) {
    around(OpCall{op, flops}, run);
  }
  Backend& inner() { return inner_; }

 private:
  Backend& inner_;
};

}  // namespace kintsugi
