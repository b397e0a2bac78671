#include "kintsugi/train/run_records.hpp"

#include <fmt/format.h>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

void RunRecords::open(const std::string& metrics_path, std::int64_t keep_through_step,
                      const std::string& tensorboard_dir) {
  metrics.emplace(metrics_path, keep_through_step);
  if (!tensorboard_dir.empty()) tensorboard.emplace(tensorboard_dir);
}

void RunRecords::write_initial_evaluation(double val_loss) {
  try {
    metrics->write_initial_evaluation(val_loss);
    if (tensorboard) tensorboard->write_scalars(0, {{"val/loss", val_loss}});
  } catch (const Error& e) {  // the first step's report ends the job with the message
    write_error = e.what();
  }
}

void RunRecords::write(const StepMetrics& m) {
  try {
    metrics->write(m);
    if (tensorboard) tensorboard->write_scalars(m.step, tensorboard_scalars(m));
  } catch (const Error& e) {  // the job saves this step, then ends with the message
    write_error = e.what();
  }
}

std::string RunRecords::val_summary(std::int64_t steps_done) const {
  if (curve.val.empty()) return "no validation data";
  const auto [first_step, first] = curve.val.front();
  const auto [last_step, last] = curve.val.back();
  if (last_step == first_step)
    return fmt::format("val loss {:.4f} at step {} (not evaluated since)", first, first_step);
  if (last_step != steps_done)
    return fmt::format("val loss {:.4f} -> {:.4f} (at step {})", first, last, last_step);
  return fmt::format("val loss {:.4f} -> {:.4f}", first, last);
}

}  // namespace kintsugi
