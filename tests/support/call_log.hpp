#pragma once
// A backend that records every op call reaching it (its name, FLOPs, bytes, dims) and runs it
// on the backend it wraps: what the tests of an op's counts read.
#include <functional>
#include <vector>

#include "kintsugi/backend/forwarding_backend.hpp"

namespace kintsugi::testing {

class CallLog : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::vector<OpCall> calls;

 protected:
  void around(const OpCall& call, const std::function<void()>& run) override {
    calls.push_back(call);
    run();
  }
};

}  // namespace kintsugi::testing
