#include "kintsugi/core/trace.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

// With a device row, the host rows say that they are the host's view.
const char* lane_name(int lane, bool device) {
  switch (lane) {
    case kComputeLane: return device ? "compute (host: enqueue and wait)" : "compute";
    case kCommunicationLane: return device ? "communication (host)" : "communication";
    default: return "GPU compute stream";
  }
}

}  // namespace

void Tracer::resolve() {
  if (!device_) return;
  for (DeviceSpan& span : device_spans_)
    events_.push_back({std::move(span.name), kDeviceComputeLane, device_->seconds(span.begin_mark),
                       device_->seconds(span.end_mark), 0});
  device_spans_.clear();
}

std::string serialize(const std::vector<TraceEvent>& events) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& e : events) j.push_back({e.name, e.lane, e.start, e.end, e.value});
  return j.dump();
}

std::vector<TraceEvent> deserialize(const std::string& text) {
  std::vector<TraceEvent> out;
  for (const auto& e : nlohmann::json::parse(text))
    out.push_back({e[0].get<std::string>(), e[1].get<int>(), e[2].get<double>(),
                   e[3].get<double>(), e[4].get<double>()});
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<std::vector<TraceEvent>>& ranks,
                        const std::vector<std::string>& rank_names) {
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r},
                      {"args", {{"name", rank_names[r]}}}});
    bool device = false;
    for (const auto& e : ranks[r]) device |= e.lane == kDeviceComputeLane;
    for (int lane : {kComputeLane, kCommunicationLane, kDeviceComputeLane}) {
      if (lane == kDeviceComputeLane && !device) continue;
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", lane},
                        {"args", {{"name", lane_name(lane, device)}}}});
    }
    for (const auto& e : ranks[r]) {
      if (e.lane < 0) {
        events.push_back({{"name", e.name}, {"ph", "C"}, {"pid", r}, {"ts", e.start * 1e6},
                          {"args", {{"value", e.value}}}});
        continue;
      }
      events.push_back({{"name", e.name},
                        {"cat", e.lane == kCommunicationLane ? "communication" : "compute"},
                        {"ph", "X"},
                        {"pid", r},
                        {"tid", e.lane},
                        {"ts", e.start * 1e6},
                        {"dur", (e.end - e.start) * 1e6}});
    }
  }
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  out.close();
  if (!out) fail("cannot write the trace {}", path);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {  // e.g. a directory by that name
    const int error = errno;
    std::remove(tmp.c_str());
    fail("cannot write the trace {}: {}", path, std::strerror(error));
  }
}

}  // namespace kintsugi
