#pragma once
// What `kintsugi plan` prints after its search (plan/campaign_search.hpp): JSON for programs, or
// for people a line on the run and the cluster, notes on what the search assumed, the best
// layouts, the Pareto front, the ramp-up and, when none fits, the smallest (docs/planner.md).
#include <optional>

#include "kintsugi/cli/plan_args.hpp"
#include "kintsugi/plan/campaign_search.hpp"
#include "kintsugi/plan/rampup_suggestion.hpp"

namespace kintsugi::cli {

// `tokens`: the campaign's budget (0: none).
void print_search_json(const PlanArgs& a, const PlanInputs& in, const CampaignSearch& found,
                       double tokens);
void print_search_text(const PlanArgs& a, const PlanInputs& in, const CampaignSearch& found,
                       double tokens);

// --rampup-tokens: a batch ramp-up for the best layout (plan/rampup_suggestion.hpp); none
// without the flag, or when the layout leaves no room for one.
std::optional<RampupSuggestion> rampup_for(const PlanArgs& a, const Candidate& best);

}  // namespace kintsugi::cli
