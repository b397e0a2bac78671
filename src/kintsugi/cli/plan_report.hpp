#pragma once
// How `kintsugi plan` shows predictions: a table for people, JSON for programs; with a token
// budget, each layout's campaign (plan/campaign.hpp) and the assumptions it took.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kintsugi/plan/campaign.hpp"
#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi::cli {

struct ReportOptions {
  double tokens = 0;     // the campaign's token budget (0: none, no campaign columns)
  bool several = false;  // the search spanned several nodes, batches or precisions: show them
};

// `ranks`: the number printed in the # column of each row (default 1, 2, ...).
void print_candidate_table(const std::vector<Candidate>& rows, std::size_t top,
                           const ClusterSpec& cluster, const ReportOptions& options,
                           const std::vector<std::size_t>& ranks = {});
nlohmann::json to_json(const Prediction& p);
// The layout's prediction with its nodes, global batch, precision and, with a budget, campaign.
nlohmann::json to_json(const Candidate& c, const ClusterSpec& cluster,
                       const ReportOptions& options);
// What a campaign's figures assume: the budget, FLOPs per token, the power per device.
void print_campaign_assumptions(const ModelConfig& model, std::int64_t seq, double tokens,
                                const ClusterSpec& cluster);
nlohmann::json campaign_assumptions_json(const ModelConfig& model, std::int64_t seq,
                                         double tokens, const ClusterSpec& cluster);

}  // namespace kintsugi::cli
