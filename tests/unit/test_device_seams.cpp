// The seams a GPU backend plugs into (core/allocator.hpp, core/host_io.hpp, the Backend's
// asynchronous contract), checked on the CPU with a stand-in device whose memory the host cannot
// touch: every block is mapped PROT_NONE and opened only while an op of the device's backend
// runs or while the device's allocator copies. Code that reads or writes device memory any
// other way -- a checkpoint writer dereferencing a parameter, a loss read without host_io, token
// ids written straight into a device tensor -- crashes here, so these tests fail when a change
// bypasses the seams.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/model/gpt.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "scratch_dir.hpp"
#include "support/guarded_device.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

using testing::GuardedAllocator;
using testing::GuardedBackend;

class DeviceSeams : public ::testing::Test {
 protected:
  void SetUp() override { register_allocator(guarded_); }
  void TearDown() override { EXPECT_FALSE(guarded_.leaked()) << "device memory leaked"; }
  GuardedAllocator guarded_;
};

RunConfig tiny_run(const std::string& precision, std::int64_t zero = 0) {
  RunConfig c;
  c.model = model_preset("gpt-tiny");
  c.model.n_layer = 2;
  c.model.seq_len = 16;
  c.model.vocab_size = 300;
  c.train.global_batch = 4;
  c.train.micro_batch = 2;
  c.train.precision = parse_name<Precision>(precision, "precision");
  c.parallel.zero = zero_stage(zero, "zero");
  resolve_layout(c, 1);
  return c;
}

void sample(int mb, std::int32_t* tokens, std::int32_t* targets, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<std::int32_t>(uniform_int_at(3, mb, i, 300));
    targets[i] = static_cast<std::int32_t>(uniform_int_at(4, mb, i, 300));
  }
}

struct Trained {
  std::vector<double> losses, norms;
  double val = 0;
  std::vector<std::vector<float>> weights;  // per parameter
};

Trained train_steps(StageModel& model, const RunConfig& c, int steps) {
  const std::int64_t n = c.train.micro_batch * c.model.seq_len;
  const auto s = [&](int mb, std::int32_t* t, std::int32_t* y) { sample(mb, t, y, n); };
  Trained out;
  for (int step = 0; step < steps; ++step) {
    const auto r = model.train_step(s, 2, 1.0 / (4.0 * c.model.seq_len), 1e-2, 1.0);
    out.losses.push_back(r.loss_sum);
    out.norms.push_back(r.grad_norm);
  }
  out.val = model.evaluate(s, 2, 2, 2);
  model.acquire_all_params();
  const ParamStore& p = *model.params().front();
  for (int i = 0; i < p.size(); ++i) out.weights.push_back(read_values(p.param(i)));
  model.release_all_params();
  return out;
}

RankState rank_state(StageModel& model) {
  RankState r;
  r.params = model.params();
  r.states = {&model.state(0)};
  return r;
}

// Training, evaluation and the weights read back agree bit for bit with the CPU run, in fp32,
// in bf16 (16-bit working copies, f32 master weights) and with ZeRO-3 (gathered units).
TEST_F(DeviceSeams, TrainingOnAGuardedDeviceEqualsTheCpu) {
  for (const auto& [precision, zero] :
       std::vector<std::pair<std::string, int>>{{"fp32", 0}, {"bf16", 0}, {"fp32", 3}}) {
    const RunConfig c = tiny_run(precision, zero);
    MemoryTracker cpu_memory, device_memory;
    auto cpu = make_cpu_backend(cpu_memory);
    auto inner = make_cpu_backend(device_memory);
    GuardedBackend device(*inner, guarded_);
    Tracer tracer;
    const Place place;
    Trained expected, got;
    {
      StageModel model(*cpu, c, place, tracer);
      expected = train_steps(model, c, 3);
    }
    {
      StageModel model(device, c, place, tracer);
      got = train_steps(model, c, 3);
      EXPECT_EQ(model.chunks().front()->input(0).device, Device::cuda);
    }
    EXPECT_EQ(got.losses, expected.losses) << precision;
    EXPECT_EQ(got.norms, expected.norms) << precision;
    EXPECT_EQ(got.val, expected.val) << precision;
    EXPECT_EQ(got.weights, expected.weights) << precision;
    EXPECT_GT(guarded_.copies, 0);
    // Parameters, gradients and optimizer state were tracked on the device's tracker.
    EXPECT_EQ(device_memory.peak(MemoryKind::parameters), cpu_memory.peak(MemoryKind::parameters));
  }
}

// A training checkpoint written from the device resumes on the CPU exactly, and the other way
// round; the model checkpoint and Hugging Face weights load onto the device.
TEST_F(DeviceSeams, CheckpointsCrossBetweenDeviceAndCpu) {
  const RunConfig c = tiny_run("bf16");
  const ScratchDir dir("seams");
  MemoryTracker cpu_memory, device_memory;
  auto cpu = make_cpu_backend(cpu_memory);
  auto inner = make_cpu_backend(device_memory);
  GuardedBackend device(*inner, guarded_);
  Tracer tracer;
  const Place place;
  const nlohmann::json layout = {{"world", 1}};
  Trained uninterrupted;
  {
    StageModel model(*cpu, c, place, tracer);
    train_steps(model, c, 2);
    uninterrupted = train_steps(model, c, 2);
  }
  for (Backend* first : {static_cast<Backend*>(&device), static_cast<Backend*>(cpu.get())}) {
    Backend* second = first == &device ? static_cast<Backend*>(cpu.get()) : &device;
    fs::path saved;
    {
      StageModel model(*first, c, place, tracer);
      train_steps(model, c, 2);
      saved = save_train_checkpoint(dir / std::string(name_of(first->device())), c.model, layout,
                                    {.step = 2,
                                     .optimizer_steps = model.state(0).optimizer().steps_taken(),
                                     .loss_scaler = model.loss_scaler().state(),
                                     .seed = c.train.seed},
                                    rank_state(model), 0);
    }
    StageModel resumed(*second, c, place, tracer);
    load_train_checkpoint(inspect_checkpoint(saved, c.model), rank_state(resumed));
    const Trained after = train_steps(resumed, c, 2);
    EXPECT_EQ(after.losses, uninterrupted.losses) << "saved on " << name_of(first->device());
    EXPECT_EQ(after.weights, uninterrupted.weights) << "saved on " << name_of(first->device());
  }

  // The final model: saved from the device, loaded into a GptModel on the device, and its
  // logits equal the CPU's (generation reads them through host_io).
  {
    StageModel model(device, c, place, tracer);
    train_steps(model, c, 1);
    save_model(dir / "model", c.model, model.params(), 1, TensorParallel{}, nullptr, 1);
  }
  std::vector<std::int32_t> tokens(c.model.seq_len);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 7 % 300);
  std::vector<float> on_cpu(300), on_device(300);
  {
    GptModel m(*cpu, c.model, DType::f32, 1, c.model.seq_len);
    load_model(dir / "model", m.params());
    m.next_token_logits(tokens.data(), 5, on_cpu.data());
  }
  {
    GptModel m(device, c.model, DType::f32, 1, c.model.seq_len);
    load_model(dir / "model", m.params());
    m.next_token_logits(tokens.data(), 5, on_device.data());
    std::vector<std::int32_t> targets(tokens.begin() + 1, tokens.end());
    targets.push_back(0);
    EXPECT_GT(m.forward_loss(tokens.data(), targets.data()), 0.0);
  }
  EXPECT_EQ(on_device, on_cpu);
}

// Host I/O converts like the backends do and goes through the device's allocator.
TEST_F(DeviceSeams, HostIoRoundsLikeTheBackend) {
  MemoryTracker memory;
  auto cpu = make_cpu_backend(memory);
  const std::vector<float> values = {1.0f, -2.5f, 3.14159f, 1e-8f, 65504.0f, 1e30f, -0.0f};
  const auto n = static_cast<std::int64_t>(values.size());
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Buffer on_device(guarded_, memory, MemoryKind::workspace, n * size_of(t));
    Buffer on_host = cpu->allocate(MemoryKind::workspace, n * size_of(t));
    const Tensor d = on_device.view(t, {n}), h = on_host.view(t, {n});
    EXPECT_EQ(d.device, Device::cuda);
    const int before = guarded_.copies;
    write_values(values.data(), d);
    EXPECT_EQ(guarded_.copies, before + 1);
    cpu->convert(Tensor{const_cast<float*>(values.data()), DType::f32, {n}}, h);
    EXPECT_EQ(read_values(d), read_values(h)) << name_of(t);
  }
  Buffer scalar(guarded_, memory, MemoryKind::workspace, 8);
  write_scalar(2.75, scalar.view(DType::f64, {1}));
  EXPECT_EQ(read_scalar(scalar.view(DType::f64, {1})), 2.75);
}

}  // namespace
}  // namespace kintsugi
