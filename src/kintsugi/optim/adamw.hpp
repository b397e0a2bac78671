#pragma once
// AdamW (Loshchilov & Hutter) over a chunk's flat buffers: first and second moments are flat
// buffers with the parameters' layout, and the update runs over long contiguous runs of
// parameters that share a weight-decay setting (none on biases and norm weights).
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/model/param_store.hpp"

namespace kintsugi {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(Backend& backend, ParamStore& params, AdamWConfig config);
  // One update with learning rate lr; gradients are multiplied by grad_scale first (clipping).
  void step(double lr, double grad_scale);
  std::int64_t steps_taken() const { return steps_; }
  Tensor first_moment() const;
  Tensor second_moment() const;

 private:
  struct Run {
    std::int64_t offset, count;
    bool decay;
  };
  Backend& backend_;
  ParamStore& params_;
  AdamWConfig config_;
  std::vector<Run> runs_;
  Buffer m_, v_;
  std::int64_t steps_ = 0;
};

}  // namespace kintsugi
