// Checks on the outputs of `kintsugi train` runs, for the multi-rank tests:
//
//   check_run compare SERIAL_DIR OTHER_DIR [RTOL [WEIGHT_RTOL]]
//     Same losses at every step (relative RTOL, default 1e-5) and the same final weights: for
//     every tensor, max |a - b| <= WEIGHT_RTOL (default RTOL) * scale, the scale being max |a|
//     but at least the model's initialization scale (biases start at zero: relative to their
//     own tiny values, fp32 rounding would look large). SIGN_FLIPS (below, compare_weights)
//     admits Lion's few sign flips.
//   check_run memory RUN_DIR
//     Rank 0's tracked bytes of parameters, gradients and optimizer state equal the ZeRO
//     formulas of plan/memory.hpp exactly, and so do its activation bytes (the per-layer
//     activation formula times the rank's slots; run.json holds both predictions).
//   check_run resumed FULL_DIR RESUMED_DIR [RTOL [WEIGHT_RTOL]]
//     A run resumed from a checkpoint of FULL_DIR's run: each step RESUMED_DIR trained has the
//     loss (and fp16 loss scale and skip) FULL_DIR had at that step (relative RTOL; 0: bit for
//     bit), and the final weights compare as above.
//   check_run weights A_DIR B_DIR [RTOL]
//     Only the final weights (model/), as above.
//   check_run comm RUN_DIR
//     Every step's bytes sent by rank 0, per group and collective (the communicator's counters,
//     metrics.jsonl), equal the theoretical volume of plan/comm_volume.hpp that the run wrote
//     into run.json (up to under one element per call where a buffer does not split evenly over
//     the group; host scalars such as the loss and the grad norm travel uncounted).
//
// Prints what it compared; exits 1 on any mismatch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>


namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<json> read_lines(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::vector<json> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(json::parse(line));
  return lines;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return json::parse(in);
}

std::map<std::string, std::vector<float>> read_weights(const fs::path& dir) {
  const json manifest = read_json(dir / "manifest.json");
  std::ifstream data(dir / "params.bin", std::ios::binary);
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : manifest.at("tensors")) {
    std::vector<float> v(t.at("bytes").get<std::size_t>() / sizeof(float));
    data.seekg(t.at("offset").get<std::streamoff>());
    data.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(t.at("bytes").get<std::size_t>()));
    out[t.at("name").get<std::string>()] = std::move(v);
  }
  return out;
}

// Losses (and `extra` keys) of the steps in `mb` against the same steps in `ma`; returns the
// failures.
int compare_losses(const std::vector<json>& ma, const std::vector<json>& mb, double rtol,
                   double& worst_loss, const std::vector<std::string>& extra = {}) {
  int failures = 0;
  std::map<std::int64_t, const json*> by_step;
  for (const auto& m : ma) by_step[m.at("step").get<std::int64_t>()] = &m;
  for (const auto& m : mb) {
    const std::int64_t step = m.at("step").get<std::int64_t>();
    const auto it = by_step.find(step);
    if (it == by_step.end()) {
      fmt::print("step {} is missing from the reference\n", step);
      ++failures;
      continue;
    }
    std::vector<std::string> keys = {"loss", "val_loss"};
    keys.insert(keys.end(), extra.begin(), extra.end());
    for (const std::string& key : keys) {
      if (!it->second->contains(key) && !m.contains(key)) continue;
      if (!it->second->contains(key) || !m.contains(key)) {
        fmt::print("step {} has {} in only one of the runs\n", step, key);
        ++failures;
        continue;
      }
      auto number = [](const json& v) { return v.is_boolean() ? double(v.get<bool>()) : v.get<double>(); };
      const double x = number(it->second->at(key)), y = number(m.at(key));
      const double rel = std::abs(x - y) / std::abs(x);
      worst_loss = std::max(worst_loss, rel);
      if (rel > rtol) {
        fmt::print("step {} {}: {:.9g} vs {:.9g} (relative {:.2e})\n", step, key, x, y, rel);
        ++failures;
      }
    }
  }
  return failures;
}

int compare_weights(const fs::path& a, const fs::path& b, double weight_rtol, double& worst_weight,
                    std::size_t& tensors);

int compare(const fs::path& a, const fs::path& b, double rtol, double weight_rtol) {
  const auto ma = read_lines(a / "metrics.jsonl"), mb = read_lines(b / "metrics.jsonl");
  if (ma.size() != mb.size()) {
    fmt::print("different step counts: {} vs {}\n", ma.size(), mb.size());
    return 1;
  }
  double worst_loss = 0, worst_weight = 0;
  std::size_t tensors = 0;
  int failures = compare_losses(ma, mb, rtol, worst_loss);
  failures += compare_weights(a, b, weight_rtol, worst_weight, tensors);
  fmt::print("{} steps, {} tensors: worst relative difference of losses {:.2e} (tolerance "
             "{:.0e}), of weights {:.2e} (tolerance {:.0e})\n",
             ma.size(), tensors, worst_loss, rtol, worst_weight, weight_rtol);
  return failures ? 1 : 0;
}

int resumed(const fs::path& full, const fs::path& part, double rtol, double weight_rtol) {
  const auto ma = read_lines(full / "metrics.jsonl"), mb = read_lines(part / "metrics.jsonl");
  if (mb.empty()) {
    fmt::print("the resumed run trained no steps\n");
    return 1;
  }
  double worst_loss = 0, worst_weight = 0;
  std::size_t tensors = 0;
  // The fp16 loss scale and skipped steps continue too (the scaler's state is saved).
  int failures = compare_losses(ma, mb, rtol, worst_loss, {"loss_scale", "skipped"});
  failures += compare_weights(full, part, weight_rtol, worst_weight, tensors);
  fmt::print("resumed steps {}..{}, {} tensors: worst relative difference of losses {:.2e} "
             "(tolerance {:.0e}), of weights {:.2e} (tolerance {:.0e})\n",
             mb.front().at("step").get<int>(), mb.back().at("step").get<int>(), tensors,
             worst_loss, rtol, worst_weight, weight_rtol);
  return failures ? 1 : 0;
}

// SIGN_FLIPS="BOUND:FRACTION" in the environment: Lion's update is lr times the sign of a
// value, and where that value is within rounding of zero two layouts may take opposite signs,
// so such an element differs by up to 2 lr per step (optim/lion.hpp). Up to FRACTION of all
// elements may then differ beyond the tolerance, each by at most BOUND (absolute); every other
// element is held to the tolerance. Unset: none may.
struct SignFlips {
  double bound = 0, fraction = 0;
  std::size_t seen = 0, elements = 0;
};
SignFlips sign_flips() {
  SignFlips f;
  if (const char* v = std::getenv("SIGN_FLIPS")) std::sscanf(v, "%lf:%lf", &f.bound, &f.fraction);
  return f;
}

int compare_weights(const fs::path& a, const fs::path& b, double weight_rtol, double& worst_weight,
                    std::size_t& tensors) {
  int failures = 0;
  SignFlips flips = sign_flips();
  const auto wa = read_weights(a / "model"), wb = read_weights(b / "model");
  const double init_std = read_json(a / "model" / "manifest.json").at("model").at("init_std");
  tensors = wa.size();
  if (wa.size() != wb.size()) {
    fmt::print("{} tensors vs {}\n", wa.size(), wb.size());
    ++failures;
  }
  for (const auto& [name, va] : wa) {
    auto it = wb.find(name);
    if (it == wb.end() || it->second.size() != va.size()) {
      fmt::print("tensor {} missing or of another size\n", name);
      ++failures;
      continue;
    }
    double max_abs = 0, max_diff = 0;
    for (std::size_t k = 0; k < va.size(); ++k) max_abs = std::max(max_abs, double(std::abs(va[k])));
    const double scale = std::max(max_abs, init_std);
    flips.elements += va.size();
    for (std::size_t k = 0; k < va.size(); ++k) {
      const double d = std::abs(double(va[k]) - double(it->second[k]));
      if (flips.bound > 0 && d > weight_rtol * scale && d <= flips.bound) {
        ++flips.seen;  // a sign flip: counted below, not held to the tolerance
        continue;
      }
      max_diff = std::max(max_diff, d);
    }
    const double rel = max_diff / scale;
    worst_weight = std::max(worst_weight, rel);
    if (rel > weight_rtol) {
      fmt::print("tensor {}: max difference {:.3e} of max {:.3e} (relative {:.2e})\n", name,
                 max_diff, max_abs, rel);
      ++failures;
    }
  }
  if (flips.bound > 0) {
    fmt::print("{} of {} weights differ by a sign flip of the update (at most {:.1e} each; "
               "allowed: {:.0e} of them)\n",
               flips.seen, flips.elements, flips.bound, flips.fraction);
    if (static_cast<double>(flips.seen) > flips.fraction * static_cast<double>(flips.elements))
      ++failures;
  }
  return failures;
}

int comm(const fs::path& run) {
  // The trainer writes the formulas' prediction for rank 0 into run.json.
  const json desc = read_json(run / "run.json");
  std::map<std::string, double> theory;
  for (const auto& [key, value] : desc.at("comm_bytes_per_step_theory").items())
    theory[key] = value.get<double>();
  // A buffer that does not split evenly over n ranks: rank 0 moves its chunks exactly, the
  // formula 2(n-1)/n of the buffer; they differ by under one element per call.
  constexpr double kSlack = 64;
  int failures = 0;
  const auto steps = read_lines(run / "metrics.jsonl");
  for (const auto& m : steps) {
    if (!m.contains("loss")) continue;  // the step-0 evaluation: no training step, no traffic
    const json measured = m.value("comm_bytes_sent", json::object());
    // Terms that depend on the step's data (expert parallelism's all-to-all) come with the
    // step's own theory, which replaces the run's estimate of them.
    std::map<std::string, double> step_theory = theory;
    const json step_terms = m.value("comm_bytes_theory", json::object());
    for (const auto& [key, value] : step_terms.items()) step_theory[key] = value.get<double>();
    std::map<std::string, double> seen;
    for (const auto& [key, value] : measured.items()) seen[key] = value.get<double>();
    for (const auto& [key, expected] : step_theory) seen.emplace(key, 0.0);
    for (const auto& [key, bytes] : seen) {
      const auto it = step_theory.find(key);
      const double expected = it == step_theory.end() || it->second == 0 ? 0.0 : it->second;
      if (std::abs(bytes - expected) > kSlack) {
        fmt::print("step {} {}: measured {} bytes, theory {:.0f}\n", m.at("step").get<int>(), key,
                   bytes, expected);
        ++failures;
      }
    }
  }
  const auto first = std::find_if(steps.begin(), steps.end(),
                                  [](const json& m) { return m.contains("loss"); });
  for (const auto& [key, expected] : theory) {
    // A term with a step theory (data-dependent) prints step 1's beside the run's estimate.
    const json step_terms =
        first == steps.end() ? json::object() : first->value("comm_bytes_theory", json::object());
    fmt::print("{:<22} theory {:>12.0f} bytes/step{}; measured at step 1: {}\n", key, expected,
               step_terms.contains(key)
                   ? fmt::format(" (balanced; step 1's own: {:.0f})", step_terms.at(key).get<double>())
                   : "",
               first == steps.end()
                   ? 0.0
                   : first->value("comm_bytes_sent", json::object()).value(key, 0.0));
  }
  return failures ? 1 : 0;
}

int memory(const fs::path& run) {
  const json theory = read_json(run / "run.json").at("memory_bytes_theory");
  const auto steps = read_lines(run / "metrics.jsonl");
  if (steps.empty()) throw std::runtime_error("no steps in metrics.jsonl");
  const json measured = steps.back().at("memory_bytes");
  int failures = 0;
  for (const char* key : {"parameters", "gradients", "optimizer_state", "activations"}) {
    const double expected = theory.at(key), got = measured.at(key);
    const double rel = expected > 0 ? std::abs(got - expected) / expected : std::abs(got);
    const bool ok = got == expected;
    fmt::print("{:<16} measured {:>12.0f} theory {:>14.1f} ({}{:.3f}%)\n", key, got, expected,
               ok ? "" : "MISMATCH ", 100 * rel);
    failures += !ok;
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "compare" && argc >= 4 && argc <= 6) {
      const double rtol = argc >= 5 ? std::stod(argv[4]) : 1e-5;
      return compare(argv[2], argv[3], rtol, argc == 6 ? std::stod(argv[5]) : rtol);
    }
    if (what == "resumed" && argc >= 4 && argc <= 6) {
      const double rtol = argc >= 5 ? std::stod(argv[4]) : 1e-5;
      return resumed(argv[2], argv[3], rtol, argc == 6 ? std::stod(argv[5]) : rtol);
    }
    if (what == "weights" && argc >= 4 && argc <= 5) {
      double worst = 0;
      std::size_t tensors = 0;
      const int failures = compare_weights(argv[2], argv[3], argc == 5 ? std::stod(argv[4]) : 0.0,
                                           worst, tensors);
      fmt::print("{} tensors: worst relative difference {:.2e}\n", tensors, worst);
      return failures ? 1 : 0;
    }
    if (what == "comm" && argc == 3) return comm(argv[2]);
    if (what == "memory" && argc == 3) return memory(argv[2]);
  } catch (const std::exception& e) {
    fmt::print("check_run: {}\n", e.what());
    return 1;
  }
  fmt::print("usage: check_run compare SERIAL_DIR OTHER_DIR [RTOL [WEIGHT_RTOL]] | check_run resumed "
             "FULL_DIR RESUMED_DIR [RTOL [WEIGHT_RTOL]] | check_run weights A B [RTOL] | check_run comm RUN_DIR | "
             "check_run memory RUN_DIR\n");
  return 2;
}
