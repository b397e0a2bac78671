#pragma once
// A Backend that passes every op to another backend, seeing each call at one hook, around()
// (Backend): the base of backends that observe ops (ProfilingBackend times them; tests guard
// device memory with it). Each call describes itself (OpCall, backend/op_call.hpp): its kind,
// its FLOPs, the bytes it must move and its shape, as the op's entry point counted them
// (backend/ops_*.cpp).
#include <string>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : Backend(&inner), inner_(inner) {}

  std::string_view name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  std::string hardware() const override { return inner_.hardware(); }
  Allocator& allocator() override { return inner_.allocator(); }
  void synchronize() override { inner_.synchronize(); }
  DeviceTimeline* timeline() override { return inner_.timeline(); }

 protected:
  Backend& inner() { return inner_; }

 private:
  Backend& inner_;
};

}  // namespace kintsugi
