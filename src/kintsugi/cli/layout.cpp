// `kintsugi layout`: where each rank of a tp x dp x pp (x cp) job sits, and which groups cross
// nodes.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/layout_flags.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi::cli {

void add_layout_command(CLI::App& app) {
  struct Args {
    int world = 0, ranks_per_node = 0;
    LayoutFlagValues layout;  // --tp, --dp, --pp, --cp, --order as train takes them
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("layout", "Print the rank map of a tp x dp x pp (x cp) layout");
  cmd->add_option("--world", args->world, "Ranks in the job")->required()->check(CLI::PositiveNumber);
  add_layout_flags(*cmd, args->layout,
                   {"parallel.tp", "parallel.dp", "parallel.pp", "parallel.cp", "parallel.order"});
  cmd->add_option("--ranks-per-node", args->ranks_per_node,
                  "Ranks on each node (default: all on one node)");
  cmd->callback([args] {
    const Args& a = *args;
    const ParallelLayout p =
        load_run_config("", layout_overrides(a.layout)).parallel.resolved(a.world);
    const LayoutMap map(a.world, p);
    const int per_node = a.ranks_per_node > 0 ? a.ranks_per_node : a.world;
    auto node = [&](int rank) { return rank / per_node; };
    // The context-parallel column and groups only where cp splits sequences.
    const bool cp = p.cp > 1;
    fmt::print("world {} = tp {} x dp {} x pp {}{} (order {}), {} ranks per node, {} node{}\n\n",
               a.world, p.tp, p.dp, p.pp, cp ? fmt::format(" x cp {}", p.cp) : "", p.order,
               per_node, (a.world + per_node - 1) / per_node,
               (a.world + per_node - 1) / per_node == 1 ? "" : "s");
    fmt::print("{:>6} {:>6} {:>4} {:>4} {:>4}{}\n", "rank", "node", "tp", "dp", "pp",
               cp ? fmt::format(" {:>4}", "cp") : "");
    for (int r = 0; r < a.world; ++r) {
      const RankCoords c = map.coords(r);
      fmt::print("{:>6} {:>6} {:>4} {:>4} {:>4}{}\n", r, node(r), c.tp, c.dp, c.pp,
                 cp ? fmt::format(" {:>4}", c.cp) : "");
    }
    std::vector<Dim> dims = {Dim::tp, Dim::dp, Dim::pp};
    if (cp) dims.push_back(Dim::cp);
    for (Dim d : dims) {
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
