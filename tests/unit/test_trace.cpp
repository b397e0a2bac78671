// The trace's device row: spans marked on a device timeline become events of the GPU stream's
// row once resolved, and the Chrome trace names that row only where a rank has one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/trace.hpp"
#include "scratch_dir.hpp"

namespace kintsugi {
namespace {

// Mark k is reached at 0.25 k seconds; counts begin() calls.
class QuarterSecondTimeline final : public DeviceTimeline {
 public:
  void begin() override {
    ++begins;
    marks = 0;
    mark();
  }
  int mark() override { return marks++; }
  double seconds(int mark) override { return 0.25 * mark; }
  int begins = 0, marks = 0;
};

TEST(Trace, DeviceSpansBecomeTheStreamRow) {
  QuarterSecondTimeline device;
  Tracer tracer;
  tracer.start(true, &device);
  EXPECT_EQ(device.begins, 1);
  const int a = tracer.device_mark(), b = tracer.device_mark(), c = tracer.device_mark();
  tracer.record_device("F c0 mb0", a, b);
  tracer.record_device("B c0 mb0", b, c);
  tracer.record("F c0 mb0", kComputeLane, 0.0, 0.1);
  EXPECT_EQ(tracer.events().size(), 1u);  // device spans wait for resolve()
  tracer.resolve();
  ASSERT_EQ(tracer.events().size(), 3u);
  const TraceEvent& f = tracer.events()[1];
  EXPECT_EQ(f.name, "F c0 mb0");
  EXPECT_EQ(f.lane, kDeviceComputeLane);
  EXPECT_DOUBLE_EQ(f.start, 0.25);  // marks 1 and 2: the origin is mark 0
  EXPECT_DOUBLE_EQ(f.end, 0.5);
  EXPECT_DOUBLE_EQ(tracer.events()[2].end, 0.75);
  tracer.resolve();  // once only
  EXPECT_EQ(tracer.events().size(), 3u);
}

TEST(Trace, NoDeviceRowWithoutATimelineOrWhenOff) {
  QuarterSecondTimeline device;
  Tracer tracer;
  tracer.start(true);
  EXPECT_EQ(tracer.device_mark(), -1);
  tracer.record_device("F c0 mb0", tracer.device_mark(), tracer.device_mark());
  tracer.resolve();
  EXPECT_TRUE(tracer.events().empty());
  tracer.start(false, &device);  // an untraced step leaves the device alone
  EXPECT_EQ(device.begins, 0);
  EXPECT_EQ(tracer.device_mark(), -1);
}

std::vector<std::string> row_names(const nlohmann::json& trace, int pid) {
  std::vector<std::string> names;
  for (const auto& e : trace["traceEvents"])
    if (e["name"] == "thread_name" && e["pid"] == pid) names.push_back(e["args"]["name"]);
  return names;
}

TEST(Trace, ChromeTraceNamesTheStreamRowOnlyWhereThereIsOne) {
  ScratchDir dir("trace");
  const std::string path = (dir.path() / "trace.json").string();
  const std::vector<TraceEvent> cpu_rank{{"F c0 mb0", kComputeLane, 0, 1, 0}};
  const std::vector<TraceEvent> gpu_rank{{"F c0 mb0", kComputeLane, 0, 1, 0},
                                         {"F c0 mb0", kDeviceComputeLane, 0.5, 2, 0}};
  write_chrome_trace(path, {cpu_rank, gpu_rank}, {"rank 0", "rank 1"});
  const nlohmann::json trace = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(row_names(trace, 0), (std::vector<std::string>{"compute", "communication"}));
  EXPECT_EQ(row_names(trace, 1),
            (std::vector<std::string>{"compute (host: enqueue and wait)", "communication (host)",
                                      "GPU compute stream"}));
  int device_events = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == kDeviceComputeLane) {
      ++device_events;
      EXPECT_EQ(e["pid"], 1);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.5e6);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.5e6);
    }
  EXPECT_EQ(device_events, 1);
}

// A trace that cannot take its place (a directory by that name) is an error, not a silent
// success, and leaves no temporary file behind.
TEST(Trace, ChromeTraceOverADirectoryIsAnError) {
  ScratchDir dir("trace-over-dir");
  const std::filesystem::path path = dir.path() / "trace.json";
  std::filesystem::create_directory(path);
  EXPECT_THROW(write_chrome_trace(path.string(), {{}}, {"rank 0"}), Error);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

}  // namespace
}  // namespace kintsugi
