// The `local` cluster of a device and the measurements behind it, run on the CPU backend: the
// code a GPU's spec comes from is the same, over another Backend. Nothing here asserts a speed,
// only what was measured, where it went and that the planner uses it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "kintsugi/backend/device_info.hpp"
#include "kintsugi/core/cpu_info.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/attention_rate.hpp"
#include "kintsugi/plan/cost_model.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/gemm_curve.hpp"
#include "kintsugi/plan/local_device_cluster.hpp"
#include "kintsugi/plan/measurement_cache.hpp"
#include "kintsugi/plan/memory_bandwidth.hpp"
#include "kintsugi/plan/search.hpp"
#include "kintsugi/plan/training_gemm.hpp"
#include "unit/scratch_dir.hpp"

namespace kintsugi {
namespace {

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

// Measurements cached under a scratch directory, never the user's cache.
class LocalDevice : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("XDG_CACHE_HOME", cache_.path().c_str(), 1); }
  ScratchDir cache_{"local-device-cache"};
  MemoryTracker memory_;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(memory_);
};

const AttentionShape kSmall{.batch = 2, .seq = 32, .heads = 4, .kv_heads = 2, .head_dim = 16};

LocalDeviceOptions small_options() {
  return {.precision = Precision::bf16, .attention = kSmall, .gemm_size = 64,
          .bandwidth_bytes = std::size_t{1} << 20, .repeats = 2};
}

TEST(AttentionRate, CountsTheCostModelsAttentionFlops) {
  // Per token and layer, the attention core is the 12 s d term of the model's FLOPs.
  for (const char* name : {"gpt2", "llama-13b"}) {
    const ModelConfig m = model_preset(name);
    const double rest = 6.0 * static_cast<double>(matmul_parameter_count(m));
    EXPECT_NEAR(model_flops_per_token(m, m.seq_len) - rest,
                m.n_layer * attention_core_flops(1, m.seq_len, m.n_head, m.head_dim()) / m.seq_len,
                1e-9 * rest)
        << name;
  }
  const AttentionShape bloom = attention_shape_of(model_preset("bloom-13b"), 3);
  EXPECT_EQ(bloom.batch, 3);
  EXPECT_EQ(bloom.alibi_heads, bloom.heads);
  EXPECT_EQ(representative_sequences(model_preset("gpt2")), 8);  // 8 x 1024 tokens
}

TEST(AttentionRate, MeasuredOnTheBackendsKernels) {
  MemoryTracker memory;
  const auto cpu = make_cpu_backend(memory);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const AttentionRate r = measure_attention_rate(*cpu, kSmall, dtype, 2);
    EXPECT_TRUE(finite_positive(r.tflops)) << name_of(dtype);
    EXPECT_EQ(r.dtype, dtype);
    EXPECT_EQ(r.shape.heads, kSmall.heads);
    EXPECT_EQ(r.hardware, cpu_model_name());
  }
  // The operands are released: measuring again leaves the tracked memory where it was (the
  // backend's own scratch, kept between calls, aside).
  const std::size_t after_one = memory.current(MemoryKind::workspace);
  measure_attention_rate(*cpu, kSmall, DType::f32, 1);
  EXPECT_EQ(memory.current(MemoryKind::workspace), after_one);
  EXPECT_THROW(measure_attention_rate(*cpu, kSmall, DType::f64, 1), Error);
  AttentionShape uneven = kSmall;
  uneven.kv_heads = 3;
  EXPECT_THROW(measure_attention_rate(*cpu, uneven, DType::f32, 1), Error);
}

TEST(GemmCurve, PassesThroughBothMeasuredRates) {
  // Rates on a known curve: peak 1000 GFLOP/s, half dimension 200.
  auto on_curve = [](int n) {
    return GemmRate{1000 * std::pow(n / (n + 200.0), 3), 0, n, "gpu", DType::bf16, ""};
  };
  const GemmCurve c = fit_gemm_curve(on_curve(3072), on_curve(768));
  EXPECT_NEAR(c.half_dim, 200, 1e-6);
  EXPECT_NEAR(c.peak_gflops, 1000, 1e-6);
  EXPECT_NEAR(peak_on_curve(on_curve(1024), c.half_dim), 1000, 1e-6);
  // A small GEMM as fast as the large one: a flat curve at the large one's rate.
  GemmRate flat = on_curve(768);
  flat.gflops = on_curve(3072).gflops * 1.01;
  EXPECT_EQ(fit_gemm_curve(on_curve(3072), flat).half_dim, 0);
  EXPECT_DOUBLE_EQ(fit_gemm_curve(on_curve(3072), flat).peak_gflops, on_curve(3072).gflops);
  // One far slower than any curve explains: the half dimension stops at the large size.
  GemmRate crawling = on_curve(768);
  crawling.gflops = 1e-3;
  EXPECT_EQ(fit_gemm_curve(on_curve(3072), crawling).half_dim, 3072);
  EXPECT_THROW(fit_gemm_curve(on_curve(768), on_curve(3072)), Error);
}

TEST_F(LocalDevice, CacheKeepsTheBestPerDeviceAndHardware) {
  const MeasurementKey cpu{Device::cpu, "same name", "attention TFLOP/s x"};
  MeasurementKey gpu = cpu;
  gpu.device = Device::cuda;
  EXPECT_FALSE(cached_measurement(cpu));
  EXPECT_EQ(store_measurement(cpu, 2.0), 2.0);
  EXPECT_EQ(store_measurement(cpu, 1.5), 2.0);  // a busy machine's lower figure
  EXPECT_FALSE(cached_measurement(gpu)) << "a GPU's figures never come from the CPU's";
  store_measurement(gpu, 7.0);
  EXPECT_EQ(*cached_measurement(cpu), 2.0);
  EXPECT_EQ(*cached_measurement(gpu), 7.0);
  int measured = 0;
  EXPECT_EQ(cached_or_measured(gpu, [&] { return ++measured, 9.0; }), 7.0);
  EXPECT_EQ(measured, 0);
  std::ofstream(measurements_file()) << "{not json";
  EXPECT_FALSE(cached_measurement(cpu));
  EXPECT_EQ(cached_or_measured(cpu, [&] { return ++measured, 3.0; }), 3.0);
  EXPECT_EQ(measured, 1);
}

TEST_F(LocalDevice, ElementwiseBandwidthAndDeviceInfo) {
  for (DType dtype : {DType::f32, DType::bf16})
    EXPECT_TRUE(finite_positive(
        measure_elementwise_bandwidth_gbs(*cpu_, dtype, std::size_t{1} << 20, 2)));
  EXPECT_THROW(measure_elementwise_bandwidth_gbs(*cpu_, DType::f32, 2, 1), Error);
  const std::size_t before = memory_.current(MemoryKind::workspace);
  measure_elementwise_bandwidth_gbs(*cpu_, DType::bf16, std::size_t{1} << 20, 1);
  EXPECT_EQ(memory_.current(MemoryKind::workspace), before);  // its buffers are released
  const DeviceInfo info = device_info(*cpu_);
  EXPECT_EQ(info.name, cpu_model_name());
  EXPECT_EQ(info.visible_devices, 1);
  EXPECT_TRUE(finite_positive(info.memory_bytes));
}

TEST_F(LocalDevice, SpecCarriesWhatWasMeasured) {
  const LinkSpec links{12.5, 3.0};
  const LocalDeviceCluster local = local_device_cluster(*cpu_, links, "given", small_options());
  const ClusterSpec& c = local.spec;
  EXPECT_EQ(c.name, "local-cpu");
  EXPECT_EQ(c.devices_per_node, 1);
  EXPECT_DOUBLE_EQ(c.memory_gb, device_info(*cpu_).memory_bytes / 1e9);
  EXPECT_EQ(c.reserved_gb, 0);
  for (double peak : {c.peak_tflops_fp32, c.peak_tflops_bf16, c.peak_tflops_fp16})
    EXPECT_TRUE(finite_positive(peak));
  // The peak is on the curve through the cached rate: never below the rate itself.
  const auto bf16 = cached_gemm_rate(rate_threads(*cpu_), DType::bf16, cpu_->hardware());
  ASSERT_TRUE(bf16);
  EXPECT_EQ(bf16->size, 64);
  EXPECT_GE(c.peak_tflops_bf16 * 1e3, bf16->gflops * (1 - 1e-12));
  EXPECT_GT(c.gemm_max_efficiency, 0.0);  // the training GEMMs' share of the forward's rate
  EXPECT_LE(c.gemm_max_efficiency, 1.0);
  EXPECT_GE(c.gemm_half_dim, 0);
  EXPECT_LE(c.gemm_half_dim, 64);
  EXPECT_TRUE(finite_positive(c.attention_tflops));
  EXPECT_TRUE(finite_positive(c.memory_bandwidth_gbs));
  EXPECT_EQ(c.intra_node.bandwidth_gbs, 12.5);
  EXPECT_EQ(c.inter_node.latency_us, 3.0);
  // What is not measured is said.
  std::string notes;
  for (const auto& n : local.notes) notes += n + "\n";
  EXPECT_NE(notes.find("links: 12.50 GB/s, 3.0 us, given; transfers between cpu devices"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("reserved 0"), std::string::npos) << notes;
  EXPECT_NE(notes.find("bf16 2x32 h4/2 d16"), std::string::npos) << notes;
  // A written spec reads back with its attention rate.
  EXPECT_DOUBLE_EQ(parse_cluster(to_toml(c), "again").attention_tflops, c.attention_tflops);
  // Measured once: the second spec comes from the cache.
  const ClusterSpec again = local_device_cluster(*cpu_, links, "given", small_options()).spec;
  EXPECT_EQ(again.attention_tflops, c.attention_tflops);
  EXPECT_EQ(again.gemm_half_dim, c.gemm_half_dim);
  EXPECT_EQ(again.memory_bandwidth_gbs, c.memory_bandwidth_gbs);
  EXPECT_EQ(again.gemm_max_efficiency, c.gemm_max_efficiency);
  EXPECT_NE(notes.find("training GEMMs: forward, backward-input and backward-weight GEMMs of 64^3 "
                       "in bf16"),
            std::string::npos)
      << notes;
}

// The three GEMMs of a layer: each rate measured, combined as their FLOPs over their summed
// times (so never above the fastest nor below the slowest), and the share of the forward.
TEST_F(LocalDevice, TrainingGemmCombinesTheThreeLayouts) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const TrainingGemm t = measure_training_gemm(*cpu_, 48, 2, dtype);
    for (double r : {t.forward_gflops, t.backward_input_gflops, t.backward_weight_gflops})
      EXPECT_TRUE(finite_positive(r));
    const double fastest =
        std::max({t.forward_gflops, t.backward_input_gflops, t.backward_weight_gflops});
    const double slowest =
        std::min({t.forward_gflops, t.backward_input_gflops, t.backward_weight_gflops});
    EXPECT_LE(t.combined_gflops, fastest * (1 + 1e-12));
    EXPECT_GE(t.combined_gflops, slowest * (1 - 1e-12));
    EXPECT_NEAR(t.efficiency, t.combined_gflops / t.forward_gflops, 1e-12);
    EXPECT_NEAR(3.0 / t.combined_gflops,
                1.0 / t.forward_gflops + 1.0 / t.backward_input_gflops +
                    1.0 / t.backward_weight_gflops,
                1e-12 / slowest);
  }
  EXPECT_THROW(measure_training_gemm(*cpu_, 8, 1, DType::f64), Error);
  const std::size_t before = memory_.current(MemoryKind::workspace);
  measure_training_gemm(*cpu_, 16, 1, DType::bf16);
  EXPECT_EQ(memory_.current(MemoryKind::workspace), before);  // its buffers are released
}

TEST_F(LocalDevice, ThePlannerTimesAttentionAtTheMeasuredRate) {
  const ClusterSpec c = local_device_cluster(*cpu_, {12.5, 3.0}, "given", small_options()).spec;
  ModelConfig m = model_preset("gpt-tiny");
  m.seq_len = kSmall.seq;
  const Workload w{.model = m, .global_batch = 4, .precision = Precision::bf16};
  const SearchResult found = search_layouts(w, c, 1, {});
  ASSERT_FALSE(found.ranked.empty());
  ClusterSpec as_gemms = c;
  as_gemms.attention_tflops = 0;
  const Layout& best = found.ranked.front().layout;
  const Prediction measured = predict(w, c, best);
  EXPECT_NE(measured.time.compute, predict(w, as_gemms, best).time.compute);
  // Half the attention rate: the attention core takes longer.
  ClusterSpec slower = c;
  slower.attention_tflops /= 2;
  EXPECT_GT(predict(w, slower, best).time.compute, measured.time.compute);
}

TEST_F(LocalDevice, OneDevicePerRank) {
  LocalDeviceOptions o = small_options();
  o.ranks = 2;
  try {
    local_device_cluster(*cpu_, {12.5, 3.0}, "given", o);
    FAIL() << "2 ranks on one device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 ranks, but 1 cpu device is visible"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kintsugi
