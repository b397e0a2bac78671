// One op dispatch (backend/backend.hpp): an op's entry point checks its shapes once, whatever
// backend it is called on, and runs the device backend's implementation inside the around() of
// every decorator from the outermost in, each seeing the call once.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kintsugi/backend/forwarding_backend.hpp"
#include "kintsugi/core/host_io.hpp"

namespace kintsugi {
namespace {

// A decorator that logs each op it sees, as "tag>name" before it runs and "tag<" after.
class Recorder final : public ForwardingBackend {
 public:
  Recorder(Backend& inner, std::string tag, std::vector<std::string>& log)
      : ForwardingBackend(inner), tag_(std::move(tag)), log_(log) {}

 protected:
  void around(const OpCall& call, const std::function<void()>& run) override {
    log_.push_back(tag_ + ">" + call.name);
    run();
    log_.push_back(tag_ + "<");
  }

 private:
  std::string tag_;
  std::vector<std::string>& log_;
};

class OpDispatch : public ::testing::Test {
 protected:
  Tensor tensor(Shape shape, std::vector<float> values = {}) {
    buffers_.push_back(cpu_->allocate(MemoryKind::workspace,
                                      static_cast<std::size_t>(shape.numel()) * sizeof(float)));
    const Tensor t = buffers_.back().view(DType::f32, shape);
    if (!values.empty()) write_values(values.data(), t);
    return t;
  }
  MemoryTracker memory_;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(memory_);
  std::vector<Buffer> buffers_;
  std::vector<std::string> log_;
};

TEST_F(OpDispatch, NestedDecoratorsSeeEachOpOnceOutermostFirst) {
  Recorder inner(*cpu_, "inner", log_);
  Recorder outer(inner, "outer", log_);
  const Tensor a = tensor({3}, {1, 2, 3}), b = tensor({3}, {10, 20, 30}), out = tensor({3});
  outer.add(a, b, out);
  EXPECT_EQ(log_, (std::vector<std::string>{"outer>add", "inner>add", "inner<", "outer<"}));
  EXPECT_EQ(read_values(out), (std::vector<float>{11, 22, 33}));  // the CPU's add ran
}

TEST_F(OpDispatch, AWrongShapeFailsAtTheEntryPointBeforeAnyDecoratorSeesIt) {
  Recorder outer(*cpu_, "outer", log_);
  const Tensor a = tensor({3}), b = tensor({4}), out = tensor({3});
  EXPECT_THROW(outer.add(a, b, out), std::logic_error);
  EXPECT_THROW(cpu_->add(a, b, out), std::logic_error);  // the same check on the device backend
  EXPECT_TRUE(log_.empty());
}

// The CPU runs linear_gelu_forward as its linear_forward and gelu_forward in sequence; a
// decorator sees the one op it was called with, not the implementation's steps.
TEST_F(OpDispatch, AnImplementationsOwnStepsAreNotSeenAsOps) {
  Recorder outer(*cpu_, "outer", log_);
  const Tensor x = tensor({2, 3}, {1, 0, -1, 0.5f, 2, 0}), w = tensor({2, 3}, {1, 1, 1, 0, 1, 0});
  const Tensor pre = tensor({2, 2}), y = tensor({2, 2});
  outer.linear_gelu_forward(x, w, nullptr, pre, y);
  EXPECT_EQ(log_, (std::vector<std::string>{"outer>linear_gelu_forward", "outer<"}));
  EXPECT_EQ(read_values(pre), (std::vector<float>{0, 0, 2.5f, 2}));  // x . w^T
}

}  // namespace
}  // namespace kintsugi
