#pragma once
// How a model chunk tells the owner of its parameter storage what it is about to use. With full
// storage nothing needs doing; sharded storage (ZeRO-3) gathers a unit's parameters on acquire
// and frees them on release, and staged gradients (ZeRO-2/3) are bound on acquire and reduced
// when final.
namespace kintsugi {

class UnitObserver {
 public:
  virtual ~UnitObserver() = default;
  // The unit's parameters (and with `grads`, its gradients) must be usable until the matching
  // release. Acquisitions nest: a unit stays available until its last release.
  virtual void acquire(int unit, bool grads) = 0;
  virtual void release(int unit) = 0;
  // This micro-batch wrote the unit's gradient completely. last_micro_batch: of the step.
  virtual void grads_final(int unit, bool last_micro_batch) = 0;
};

}  // namespace kintsugi
