// `kintsugi layout`: where each rank of a tp x dp x pp job sits, and which groups cross nodes.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/comm/topology.hpp"

namespace kintsugi::cli {

void add_layout_command(CLI::App& app) {
  struct Args {
    int world = 0, tp = 1, dp = 0, pp = 1, ranks_per_node = 0;
    std::string order = "tp-dp-pp";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("layout", "Print the rank map of a tp x dp x pp layout");
  cmd->add_option("--world", args->world, "Ranks in the job")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--tp", args->tp, "Tensor-parallel ranks")->check(CLI::PositiveNumber);
  cmd->add_option("--dp", args->dp, "Data-parallel ranks (default: world / (tp x pp))");
  cmd->add_option("--pp", args->pp, "Pipeline stages")->check(CLI::PositiveNumber);
  cmd->add_option("--ranks-per-node", args->ranks_per_node,
                  "Ranks on each node (default: all on one node)");
  cmd->add_option("--order", args->order, "Rank order, fastest-varying first");
  cmd->callback([args] {
    const Args& a = *args;
    const int dp = a.dp > 0 ? a.dp : a.world / (a.tp * a.pp);
    const LayoutMap map(a.world, {.tp = a.tp, .pp = a.pp, .dp = dp, .order = a.order});
    const int per_node = a.ranks_per_node > 0 ? a.ranks_per_node : a.world;
    auto node = [&](int rank) { return rank / per_node; };
    fmt::print("world {} = tp {} x dp {} x pp {} (order {}), {} ranks per node, {} node{}\n\n",
               a.world, a.tp, dp, a.pp, a.order, per_node, (a.world + per_node - 1) / per_node,
               (a.world + per_node - 1) / per_node == 1 ? "" : "s");
    fmt::print("{:>6} {:>6} {:>4} {:>4} {:>4}\n", "rank", "node", "tp", "dp", "pp");
    for (int r = 0; r < a.world; ++r) {
      const RankCoords c = map.coords(r);
      fmt::print("{:>6} {:>6} {:>4} {:>4} {:>4}\n", r, node(r), c.tp, c.dp, c.pp);
    }
    for (Dim d : {Dim::tp, Dim::dp, Dim::pp}) {
      const auto groups = map.groups(d);
      int crossing = 0;
      std::string text;
      for (const auto& g : groups) {
        bool crosses = false;
        for (int r : g) crosses |= node(r) != node(g.front());
        crossing += crosses;
        text += fmt::format(" [{}]{}", fmt::join(g, " "), crosses ? "*" : "");
      }
      fmt::print("\n{} groups ({} of {} ranks, {} crossing nodes):{}\n", name_of(d),
                 groups.size(), map.size(d), crossing, text);
    }
    fmt::print("\n* = the group spans more than one node\n");
  });
}

}  // namespace kintsugi::cli
