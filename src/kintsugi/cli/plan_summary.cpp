#include "kintsugi/cli/plan_summary.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kintsugi/cli/plan_report.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi::cli {

namespace {

ReportOptions report_options(const PlanArgs& a, const PlanInputs& in, const CampaignSearch& found,
                             double tokens) {
  return {.tokens = tokens,
          .show_nodes = in.axes.nodes.size() > 1,
          .show_batch = found.global_batches.size() > 1,
          .show_precision = in.axes.precision.size() > 1,
          .wide = a.wide};
}

std::string does_not_fit(const Prediction& p, const ClusterSpec& cluster) {
  return fmt::format("needs {:.1f} GB of {:.0f}", p.memory.total() / 1e9, cluster.memory_gb);
}

// The axes searched: one value as before a search spanned several, else a list.
void put_axes_json(nlohmann::json& j, const PlanInputs& in, const CampaignSearch& found) {
  const std::vector<std::int64_t>& nodes = in.axes.nodes;
  if (nodes.size() == 1) {
    j["world"] = in.chosen.spec.devices_per_node * nodes.front();
    j["nodes"] = nodes.front();
  } else {
    j["nodes"] = nodes;
  }
  if (found.global_batches.size() == 1) j["global_batch"] = found.global_batches.front();
  else j["global_batch"] = found.global_batches;
  if (in.axes.precision.size() == 1) {
    j["precision"] = std::string(name_of(in.axes.precision.front()));
  } else {
    j["precision"] = nlohmann::json::array();
    for (Precision p : in.axes.precision) j["precision"].push_back(std::string(name_of(p)));
  }
}

// The ranked layouts (--top of them), the Pareto front of several searches and, with nothing
// fitting (a pinned layout too large, say), the smallest, predicted anyway.
void put_layouts_json(nlohmann::json& j, const PlanArgs& a, const CampaignSearch& found,
                      const ClusterSpec& cluster, const ReportOptions& report) {
  const std::vector<Candidate>& candidates = found.candidates;
  const auto shown = static_cast<std::size_t>(a.top);
  for (std::size_t i = 0; i < std::min(shown, candidates.size()); ++i) {
    j["layouts"].push_back(to_json(candidates[i], cluster, report));
    if (cluster.refit_layouts > 0)
      j["layouts"].back()["ties_with_best"] = i <= found.tied_with_best;
  }
  if (cluster.refit_layouts > 0) {
    j["refit_error"] = cluster.refit_error;
    j["tied_with_best"] = found.tied_with_best;  // how many layouts after #1 tie with it
  }
  if (found.several()) {
    j["pareto_front"] = nlohmann::json::array();
    for (std::size_t i : found.front) {
      j["pareto_front"].push_back(to_json(candidates[i], cluster, report));
      j["pareto_front"].back()["rank"] = i + 1;
    }
  }
  if (candidates.empty()) {
    j["not_fitting"] = nlohmann::json::array();
    for (const Candidate& c : found.too_big) {
      j["not_fitting"].push_back(to_json(c, cluster, report));
      j["not_fitting"].back()["does_not_fit"] = does_not_fit(c.prediction, cluster);
    }
  }
}

// --critical-batch-loss: what the critical batch is, and what it leaves out.
std::string critical_batch_note(const PlanArgs& a, const BatchLimit& limit, std::int64_t seq_len) {
  const CriticalBatchFit fit;
  const std::string head = fmt::format(
      "critical batch at loss {} nats/token: B_crit = {:.3g} / L^(1/{}) = {:.4g} tokens",
      a.critical_batch_loss, fit.b_star_tokens, fit.alpha_b, limit.critical_tokens);
  const char* source = "(Kaplan et al. 2020, Eq. 1.4; losses on WebText2 with GPT-2's tokenizer)";
  if (limit.critical_sequences >= kUnboundedCriticalBatch)
    return fmt::format("{} {}: above any global batch, none is left out{}", head, source,
                       limit.sequences > 0 && limit.sequences < kUnboundedCriticalBatch
                           ? fmt::format(" (--max-global-batch {} still limits)", limit.sequences)
                           : "");
  return fmt::format("{} = {} sequences of {} {}: global batches above {} are left out{}", head,
                     limit.critical_sequences, seq_len, source, limit.sequences,
                     limit.sequences < limit.critical_sequences ? " (--max-global-batch)" : "");
}

std::string rampup_text(const RampupSuggestion& r, const Candidate& best, double ramp_tokens) {
  const std::int64_t seq = best.workload.model.seq_len;
  return fmt::format(
      "train.batch_rampup = [{}, {}, {}]: global batch {} ({} tokens) -> {} by {} "
      "over the first {:.3g} tokens. GPT-3's recipe (Brown et al. 2020, App. B): "
      "from 32K tokens, linear over the first 4-12B; the start is the smallest "
      "batch at or above 32K tokens in steps of {} sequences, which this layout "
      "splits (dp x micro-batch{})",
      r.start, r.increment, r.samples, r.start, r.start * seq, best.workload.global_batch,
      r.increment, ramp_tokens, r.increment,
      r.increment == best.prediction.layout.parallel.dp * best.prediction.layout.micro_batch
          ? ""
          : " x pp: the schedule's rounds");
}

// The first line: the model, the cluster and the axes searched.
void print_search_head(const PlanInputs& in, const CampaignSearch& found) {
  const ClusterSpec& cluster = in.chosen.spec;
  const double n = static_cast<double>(parameter_count(in.base.model));
  auto count = [](double v) {
    return v >= 1e9 ? fmt::format("{:.2f}B", v / 1e9) : fmt::format("{:.2f}M", v / 1e6);
  };
  // A mixture of experts: also the parameters a token uses (docs/moe.md).
  const std::string params =
      count(n) + (in.base.model.is_moe()
                      ? ", " + count(active_parameter_count(in.base.model)) + " active"
                      : std::string());
  std::string precisions;
  for (Precision p : in.axes.precision)
    precisions += (precisions.empty() ? "" : ",") + std::string(name_of(p));
  const std::vector<std::int64_t>& nodes = in.axes.nodes;
  if (nodes.size() == 1) {
    const std::int64_t world = cluster.devices_per_node * nodes.front();
    fmt::print("{} ({} parameters) on {} x {} = {} devices of {} ({}), global batch {} x "
               "seq {}, {}\n",
               in.base.model.name, params, nodes.front(), cluster.devices_per_node, world,
               cluster.name, cluster.source, list_text(found.global_batches),
               in.first.model.seq_len, precisions);
  } else {
    fmt::print("{} ({} parameters) on {} nodes of {} devices of {} ({}), global batch {} x seq "
               "{}, {}\n",
               in.base.model.name, params, list_text(nodes), cluster.devices_per_node,
               cluster.name, cluster.source, list_text(found.global_batches),
               in.first.model.seq_len, precisions);
  }
}

// What the search assumed (the cluster's notes, the batch limit, a default batch, the ranking,
// the campaign's figures), then how many layouts were valid and fit.
void print_search_notes(const PlanArgs& a, const PlanInputs& in, const CampaignSearch& found,
                        double tokens) {
  const ClusterSpec& cluster = in.chosen.spec;
  const Workload& first = in.first;
  print_notes(in.chosen.notes);
  if (in.axes.limit.critical_sequences > 0)
    fmt::print("note: {}\n", critical_batch_note(a, in.axes.limit, first.model.seq_len));
  // Only a run described by flags alone takes the default; a config's value is the run's,
  // whether or not it equals the default.
  if (a.global_batch.empty() && a.grad_accum.empty() && a.config.empty())
    fmt::print("note: global batch {} sequences ({} tokens per step) is kintsugi's default, "
               "not necessarily your run's: pass --global-batch (layouts and times depend on "
               "it)\n",
               first.global_batch, first.global_batch * first.model.seq_len);
  if (in.objective == Objective::step && found.global_batches.size() > 1)
    fmt::print("note: ranked by step time, which favours the smaller global batches; "
               "--objective time ranks by the time to train a token budget\n");
  if (tokens > 0) print_campaign_assumptions(in.base.model, first.model.seq_len, tokens, cluster);
  fmt::print("{} valid layouts, {} fit in {:.0f} GB per device{}\n\n", found.enumerated,
             found.fitting, cluster.memory_gb,
             found.several() ? fmt::format(" ({} searches), ranked by {}", found.searched,
                                           name_of(in.objective))
             : in.objective != Objective::step
                 ? fmt::format(", ranked by {}", name_of(in.objective))
                 : std::string());
}

// A cluster `tune` refit carries its error on the steps it measured: the layouts predicted
// within it of the best cannot be ordered by the model (plan/refit.hpp) and tie with it.
void print_tie_note(const CampaignSearch& found, const ClusterSpec& cluster) {
  if (found.tied_with_best == 0) return;
  fmt::print("\nnote: #1-#{} tie: their predictions are within the refit's error of #1's "
             "(+-{:.1f}%, [refit] of {}, from {} measured layouts), so the model cannot order "
             "them; measure them to choose (kintsugi tune runs the top layouts)\n",
             found.tied_with_best + 1, 100 * cluster.refit_error, cluster.source,
             cluster.refit_layouts);
}

void print_pareto_front(const CampaignSearch& found, const ClusterSpec& cluster,
                        const ReportOptions& report) {
  std::vector<Candidate> on_front;
  for (std::size_t i : found.front) on_front.push_back(found.candidates[i]);
  fmt::print("\nPareto front ({} layouts: none is beaten by another in time per token,\n"
             "devices{}; # is the rank above):\n",
             found.front.size(), cluster.has_power() ? " and energy per token" : "");
  print_candidate_table(on_front, on_front.size(), cluster, report, found.front);
}

void print_rampup(const PlanArgs& a, const Candidate& best) {
  const auto r = rampup_for(a, best);
  fmt::print("\nbatch ramp-up for #1: {}\n",
             r ? rampup_text(*r, best, a.rampup_tokens)
               : fmt::format("none: global batch {} leaves no room below it for a ramp "
                             "from 32K tokens in steps the layout can split",
                             best.workload.global_batch));
}

void print_not_fitting(const CampaignSearch& found, std::size_t shown, const ClusterSpec& cluster,
                       const ReportOptions& report) {
  fmt::print("none fits; the smallest, predicted anyway:\n");
  print_candidate_table(found.too_big, shown, cluster, report);
  for (std::size_t i = 0; i < std::min(shown, found.too_big.size()); ++i)
    fmt::print("{:>3} does not fit: {}\n", i + 1,
               does_not_fit(found.too_big[i].prediction, cluster));
}

}  // namespace

std::optional<RampupSuggestion> rampup_for(const PlanArgs& a, const Candidate& best) {
  if (a.rampup_tokens <= 0) return std::nullopt;
  return suggest_rampup(best.workload.model, best.prediction.layout, best.workload.global_batch,
                        a.rampup_tokens);
}

void print_search_json(const PlanArgs& a, const PlanInputs& in, const CampaignSearch& found,
                       double tokens) {
  const ClusterSpec& cluster = in.chosen.spec;
  const BatchLimit& limit = in.axes.limit;
  nlohmann::json j = {{"model", in.base.model.name},
                      {"cluster", cluster.name},
                      {"seq", in.first.model.seq_len},
                      {"objective", std::string(name_of(in.objective))},
                      {"enumerated", found.enumerated},
                      {"fitting", found.fitting},
                      {"layouts", nlohmann::json::array()}};
  put_axes_json(j, in, found);
  if (tokens > 0)
    j["campaign"] =
        campaign_assumptions_json(in.base.model, in.first.model.seq_len, tokens, cluster);
  if (limit.critical_sequences > 0)
    j["critical_batch"] = {{"loss", a.critical_batch_loss},
                           {"tokens", limit.critical_tokens},
                           {"sequences", limit.critical_sequences},
                           {"max_global_batch", limit.sequences},
                           {"source", "Kaplan et al. 2020, Eq. 1.4"}};
  if (!found.candidates.empty())
    if (const auto r = rampup_for(a, found.candidates.front()))
      j["batch_rampup"] = {r->start, r->increment, r->samples};
  if (!in.chosen.notes.empty()) j["cluster_notes"] = in.chosen.notes;
  put_layouts_json(j, a, found, cluster, report_options(a, in, found, tokens));
  fmt::print("{}\n", j.dump(2));
}

void print_search_text(const PlanArgs& a, const PlanInputs& in, const CampaignSearch& found,
                       double tokens) {
  const ClusterSpec& cluster = in.chosen.spec;
  const ReportOptions report = report_options(a, in, found, tokens);
  const auto shown = static_cast<std::size_t>(a.top);  // --top: at least 1
  print_search_head(in, found);
  print_search_notes(a, in, found, tokens);
  if (!found.candidates.empty()) print_candidate_table(found.candidates, shown, cluster, report);
  print_tie_note(found, cluster);
  if (found.several() && !found.candidates.empty()) print_pareto_front(found, cluster, report);
  if (!found.candidates.empty() && a.rampup_tokens > 0) print_rampup(a, found.candidates.front());
  if (found.candidates.empty() && !found.too_big.empty())
    print_not_fitting(found, shown, cluster, report);
}

}  // namespace kintsugi::cli
