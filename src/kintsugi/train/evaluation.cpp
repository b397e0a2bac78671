#include "kintsugi/train/evaluation.hpp"

#include <algorithm>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

RankState rank_state(StageModel& model, const Place& place) {
  RankState r;
  r.params = model.params();
  for (int c = 0; c < model.state_count(); ++c) r.states.push_back(&model.any_state(c));
  r.tp_rank = place.tp.rank();
  r.world = place.topology ? &place.topology->world() : nullptr;
  return r;
}

std::optional<double> mean_window_loss(StageModel& model, const Place& place,
                                       const data::BatchSampler& data, std::int64_t windows,
                                       std::int64_t micro_batch,
                                       const std::function<void()>& on_batch) {
  KINTSUGI_ASSERT(windows > 0 && micro_batch > 0);
  // The last micro-batch may be partly empty: its slots past `windows` have no targets (loss 0),
  // so the windows, not the micro-batch, decide what is measured (docs/metrics.md).
  const std::int64_t T = data.seq_len(), mb = micro_batch, batches = (windows + mb - 1) / mb;
  // Round-robin: rank r has batches r, r + dp, ...; every rank has `shared` of them (possibly
  // none), the first batches % dp ranks one more.
  const int mine = static_cast<int>((batches - place.dp_rank + place.dp_size - 1) / place.dp_size);
  const int shared = static_cast<int>(batches / place.dp_size);
  const int lockstep = static_cast<int>((batches + place.dp_size - 1) / place.dp_size);
  const double sum = model.evaluate(
      [&](int k, std::int32_t* tokens, std::int32_t* targets) {
        // Forwards past this rank's share (ZeRO-3 lockstep) read window 0; their loss is dropped.
        const std::int64_t b =
            k < mine ? place.dp_rank + static_cast<std::int64_t>(k) * place.dp_size : 0;
        // 3D tensor parallelism: this z rank's share of the micro-batch's windows.
        const std::int64_t share = mb / place.depth_size, first = place.depth_rank * share;
        for (std::int64_t i = 0; i < share; ++i) {
          const std::int64_t w = b * mb + first + i;
          if (w < windows) {
            data.eval_window(w, windows, tokens + i * T, targets + i * T);
          } else {
            std::fill(tokens + i * T, tokens + (i + 1) * T, 0);
            std::fill(targets + i * T, targets + (i + 1) * T, -1);  // ignored: no loss
          }
        }
        if (on_batch) on_batch();
      },
      mine, shared, lockstep);
  if (model.interrupted()) return std::nullopt;
  return sum / static_cast<double>(windows * T);
}

}  // namespace kintsugi
