#pragma once
// A Backend that times every op of another backend: where a training step spends its time,
// per op kind, with the GEMM rate of the linear layers. Used by `kintsugi bench step --profile`.
// It waits for each op to finish (synchronize) before stopping its clock, so on an asynchronous
// device it measures ops one at a time, without the overlap of a normal run.
#include <map>
#include <string>

#include "kintsugi/backend/forwarding_backend.hpp"

namespace kintsugi {

struct OpProfile {
  std::int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // for GEMM-based ops: 2 * m * n * k summed
};

class ProfilingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const std::map<std::string, OpProfile>& profile() const { return profile_; }
  void reset() { profile_.clear(); }

 protected:
  void around(const char* op, double flops, const std::function<void()>& run) override;

 private:
  std::map<std::string, OpProfile> profile_;
};

}  // namespace kintsugi
