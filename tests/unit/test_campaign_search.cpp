// The search `kintsugi plan` runs over node counts, global batches and precisions
// (plan/campaign_search.hpp): the batch limit, the batches gradient accumulation makes, and the
// search's totals, order, Pareto front and refit ties against the searches it is made of.
#include <gtest/gtest.h>

#include <algorithm>

#include "kintsugi/plan/campaign_search.hpp"
#include "kintsugi/plan/refit.hpp"
#include "support/configs.hpp"

namespace kintsugi {
namespace {

using testing::cluster_preset;
using Batches = std::vector<std::int64_t>;

TEST(BatchLimit, TheCapOrTheCriticalBatchWhicheverIsSmaller) {
  const BatchLimit none = batch_limit(0, 0, 2048);
  EXPECT_TRUE(none.allows(1'000'000'000));
  EXPECT_EQ(none.critical_sequences, 0);

  const BatchLimit cap = batch_limit(128, 0, 2048);
  EXPECT_TRUE(cap.allows(128));
  EXPECT_FALSE(cap.allows(129));
  EXPECT_FALSE(cap.critical_sets_it);

  // At loss 2.5 the critical batch is 1243 sequences of 2048 (test_critical_batch.cpp).
  const BatchLimit critical = batch_limit(0, 2.5, 2048);
  EXPECT_EQ(critical.sequences, 1243);
  EXPECT_TRUE(critical.critical_sets_it);
  EXPECT_DOUBLE_EQ(critical.critical_tokens, critical_batch_tokens(2.5));

  const BatchLimit smaller_cap = batch_limit(1000, 2.5, 2048);
  EXPECT_EQ(smaller_cap.sequences, 1000);
  EXPECT_FALSE(smaller_cap.critical_sets_it);
  EXPECT_EQ(smaller_cap.critical_sequences, 1243);  // still reported

  const BatchLimit larger_cap = batch_limit(2000, 2.5, 2048);
  EXPECT_EQ(larger_cap.sequences, 1243);
  EXPECT_TRUE(larger_cap.critical_sets_it);
  EXPECT_FALSE(batch_limit(1243, 2.5, 2048).critical_sets_it);  // a tie stays the cap's
}

TEST(BatchLimit, BatchesFromAccumulationAreMicroBatchTimesStepsTimesDp) {
  SearchSpace s;
  s.micro_batch = {2, 4};
  s.grad_accum = {1, 2};
  // dp 1: 2, 4, 8; dp 2: 4, 8, 16; dp 4: 8, 16, 32 (dp 3 does not divide 4 devices).
  EXPECT_EQ(batches_from_accumulation(s, 4, {}), Batches({2, 4, 8, 16, 32}));
  EXPECT_EQ(batches_from_accumulation(s, 4, batch_limit(16, 0, 1024)), Batches({2, 4, 8, 16}));
  s.pins.pin("dp", {"2"});
  EXPECT_EQ(batches_from_accumulation(s, 4, {}), Batches({4, 8, 16}));
  SearchSpace one{.micro_batch = {1}, .grad_accum = {1}};
  EXPECT_EQ(batches_from_accumulation(one, 6, {}), Batches({1, 2, 3, 6}));
  one.micro_batch.clear();
  EXPECT_TRUE(batches_from_accumulation(one, 6, {}).empty());
}

Workload tiny_workload() {
  Workload w{.model = model_preset("gpt-tiny"), .global_batch = 16,
             .precision = Precision::bf16};
  w.model.n_layer = 4;
  return w;
}

// Several searches: their totals summed, one list ranked by the objective, and its Pareto front.
TEST(CampaignSearch, SumsRanksAndFrontsItsSearches) {
  const ClusterSpec h100 = cluster_preset("dgx-h100");
  const Workload w = tiny_workload();
  SearchSpace space;
  space.pins.pin("tensor_grid", {"[]"});
  CampaignAxes axes{.nodes = {1, 2}, .global_batch = {32, 16},
                    .precision = {Precision::bf16, Precision::fp32}};
  const CampaignSearch found = search_campaign(w, h100, axes, space, Objective::time);
  EXPECT_EQ(found.searched, 8);
  EXPECT_TRUE(found.several());
  EXPECT_EQ(found.global_batches, Batches({16, 32}));
  std::int64_t enumerated = 0, fitting = 0;
  for (std::int64_t nodes : axes.nodes)
    for (std::int64_t batch : axes.global_batch)
      for (Precision p : axes.precision) {
        Workload one = w;
        one.global_batch = batch;
        one.precision = p;
        const SearchResult r = search_layouts(one, h100, 8 * nodes, space);
        enumerated += r.enumerated;
        fitting += r.fitting;
      }
  EXPECT_EQ(found.enumerated, enumerated);
  EXPECT_EQ(found.fitting, fitting);
  ASSERT_EQ(found.candidates.size(), static_cast<std::size_t>(fitting));
  for (std::size_t i = 1; i < found.candidates.size(); ++i)
    EXPECT_LE(seconds_per_token(found.candidates[i - 1]), seconds_per_token(found.candidates[i]));
  for (const Candidate& c : found.candidates)
    EXPECT_EQ(c.prediction.layout.parallel.world(), 8 * c.nodes);
  EXPECT_EQ(found.front, pareto_front(found.candidates, h100));
  EXPECT_FALSE(found.front.empty());
}

TEST(CampaignSearch, SearchesTheBatchesAccumulationMakes) {
  const ClusterSpec h100 = cluster_preset("dgx-h100");
  SearchSpace space{.micro_batch = {1}, .grad_accum = {1}};
  space.pins.pin("tensor_grid", {"[]"});
  CampaignAxes axes{.nodes = {1}, .global_batch = {16}, .precision = {Precision::bf16},
                    .batches_from_accumulation = true, .limit = batch_limit(4, 0, 1024)};
  const CampaignSearch found =
      search_campaign(tiny_workload(), h100, axes, space, Objective::step);
  // One micro-batch of 1 a step on dp ranks: the batch is dp, within the limit of 4.
  EXPECT_EQ(found.global_batches, Batches({1, 2, 4}));
  ASSERT_FALSE(found.candidates.empty());
  for (const Candidate& c : found.candidates)
    EXPECT_EQ(c.workload.global_batch, c.prediction.layout.parallel.dp);
}

// On a cluster `tune` refit, the layouts after #1 whose step is within the refit's error of its
// tie with it, counted in rank order up to the first that does not; only one search ranked by
// step time is told so.
TEST(CampaignSearch, RefitTiesWithTheBest) {
  ClusterSpec refit = cluster_preset("dgx-h100");
  refit.refit_layouts = 6;
  refit.refit_error = 0.05;
  SearchSpace space;
  space.pins.pin("tensor_grid", {"[]"});
  const CampaignAxes one{.nodes = {1}, .global_batch = {16}, .precision = {Precision::bf16}};
  const CampaignSearch found = search_campaign(tiny_workload(), refit, one, space, Objective::step);
  ASSERT_GT(found.candidates.size(), 2u);
  std::size_t ties = 0;
  const double best = found.candidates.front().prediction.time.total();
  while (ties + 1 < found.candidates.size() &&
         within_refit_error(best, found.candidates[ties + 1].prediction.time.total(), 0.05))
    ++ties;
  EXPECT_EQ(found.tied_with_best, ties);
  EXPECT_GT(ties, 0u);  // gpt-tiny's layouts are many and close
  EXPECT_LT(ties + 1, found.candidates.size());
  EXPECT_EQ(search_campaign(tiny_workload(), refit, one, space, Objective::time).tied_with_best,
            0u);
  CampaignAxes two = one;
  two.nodes = {1, 2};
  EXPECT_EQ(search_campaign(tiny_workload(), refit, two, space, Objective::step).tied_with_best,
            0u);
}

TEST(CampaignSearch, NothingFitsKeepsTheFiveSmallest) {
  const Workload w{.model = model_preset("gpt-1t"), .global_batch = 16,
                   .precision = Precision::bf16};
  const CampaignAxes axes{.nodes = {1}, .global_batch = {16}, .precision = {Precision::bf16}};
  const CampaignSearch found =
      search_campaign(w, cluster_preset("dgx-a100-80gb"), axes, SearchSpace{}, Objective::step);
  EXPECT_TRUE(found.candidates.empty());
  EXPECT_EQ(found.fitting, 0);
  ASSERT_EQ(found.too_big.size(), 5u);
  for (std::size_t i = 1; i < found.too_big.size(); ++i)
    EXPECT_LE(found.too_big[i - 1].prediction.memory.total(),
              found.too_big[i].prediction.memory.total());
}

}  // namespace
}  // namespace kintsugi
