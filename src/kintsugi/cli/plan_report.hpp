#pragma once
// How `kintsugi plan` shows predictions: a table for people, JSON for programs; with a token
// budget, each layout's campaign (plan/campaign.hpp) and the assumptions it took.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/plan/campaign.hpp"
#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi::cli {

struct ReportOptions {
  double tokens = 0;  // the campaign's token budget (0: none, no campaign columns)
  // The search spanned several node counts, global batches or precisions: a column for each.
  bool show_nodes = false, show_batch = false, show_precision = false;
  // Every column (the step's breakdown, samples/s, HFU, hours and joules) and every layout; by
  // default the table keeps within 100 columns and layouts with the same figures share a row.
  bool wide = false;
};

// Numbers for people, never with an exponent: rates with a K/M/G prefix (950, 12.3K, 4.56M),
// seconds with a unit (1.23s, 45.6ms, 789us), three significant digits (below 999.5).
std::string rate_text(double per_second);
std::string seconds_text(double seconds);
std::string three_digits_text(double x);

// The default width of plan's tables: a terminal's, with room to spare.
constexpr std::size_t kTableWidth = 100;
struct TableColumn {
  std::string head;
  bool left = false;  // text, left-aligned (else numbers, right-aligned)
  std::size_t min_width = 0;
};
// `rows` under their headers, each column as wide as its widest cell; `wrap`: a text column
// that continues on the next line where a row would pass kTableWidth (none: never wrapped).
void print_table(const std::vector<TableColumn>& columns,
                 const std::vector<std::vector<std::string>>& rows,
                 std::optional<std::size_t> wrap = std::nullopt);

// `ranks`: the number printed in the # column of each row (default 1, 2, ...); given (the Pareto
// front's), rows are never merged.
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
