#include "kintsugi/plan/cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>
#include <toml++/toml.h>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/cluster_presets.hpp"
#include "kintsugi/plan/local_cluster.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

double ClusterSpec::peak_tflops(Precision precision) const {
  switch (precision) {
    case Precision::bf16: return peak_tflops_bf16;
    case Precision::fp16: return peak_tflops_fp16;
    case Precision::fp32: return peak_tflops_fp32;
  }
  KINTSUGI_ASSERT(false);
}

double ClusterSpec::gemm_efficiency(double m, double n, double k) const {
  const double h = gemm_half_dim;
  return gemm_max_efficiency * m / (m + h) * n / (n + h) * k / (k + h);
}

double LinkSpec::rate_gbs(LinkUse use) const {
  const double measured = use == LinkUse::all_reduce       ? all_reduce_gbs
                          : use == LinkUse::reduce_scatter ? reduce_scatter_gbs
                          : use == LinkUse::all_gather     ? all_gather_gbs
                                                           : 0.0;
  return measured > 0 ? measured : bandwidth_gbs;
}

LinkSpec ClusterSpec::node_link(bool crosses_nodes, std::int64_t members) const {
  if (crosses_nodes) return inter_node;
  if (!intra_node_all_to_all || devices_per_node < 2) return intra_node;
  // Direct links only: the members reach each other over (members - 1) of the node's
  // (devices - 1) equal links (docs/planner.md, "Cluster specs").
  const std::int64_t k = std::clamp<std::int64_t>(members, 2, devices_per_node);
  const double share = static_cast<double>(k - 1) / static_cast<double>(devices_per_node - 1);
  LinkSpec l = intra_node;
  for (double* rate :
       {&l.bandwidth_gbs, &l.all_reduce_gbs, &l.reduce_scatter_gbs, &l.all_gather_gbs})
    *rate *= share;
  return l;
}

LinkSpec ClusterSpec::group_link(const std::vector<int>& devices) const {
  int tier = 0;  // 0: one package, 1: one node, 2: several nodes
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const int a = devices[i], b = devices[(i + 1) % devices.size()];
    if (a / devices_per_node != b / devices_per_node) tier = std::max(tier, 2);
    else if (devices_per_package == 0 || a / devices_per_package != b / devices_per_package)
      tier = std::max(tier, 1);
  }
  if (tier == 0 && devices_per_package > 0) return package;
  return node_link(tier == 2, static_cast<std::int64_t>(devices.size()));
}

namespace {

LinkSpec scaled(LinkSpec link, double factor) {
  for (double* rate : {&link.bandwidth_gbs, &link.all_reduce_gbs, &link.reduce_scatter_gbs,
                       &link.all_gather_gbs})
    *rate *= factor;
  return link;
}

}  // namespace

LinkSpec ClusterSpec::ring_link(const std::vector<int>& devices) const {
  const LinkSpec link = group_link(devices);
  if (devices.size() < 2 || !multi_rail) return link;
  // The fewest members the ring has in any node it spans: its slowest node.
  std::map<std::int64_t, std::int64_t> per_node;
  for (int d : devices) ++per_node[d / devices_per_node];
  if (per_node.size() == 1) return link;
  std::int64_t members = static_cast<std::int64_t>(devices.size());
  for (const auto& [node, n] : per_node) members = std::min(members, n);
  if (members == 1) return link;
  // One channel per member's NIC share, bounded by the members' ring inside the node (an
  // all-to-all node's share of its links: node_link).
  const LinkSpec rails = scaled(inter_node, static_cast<double>(members));
  const LinkSpec node = node_link(false, members);
  LinkSpec out = rails;
  for (auto [r, n] : {std::pair{&out.bandwidth_gbs, node.bandwidth_gbs},
                      std::pair{&out.all_reduce_gbs, node.rate_gbs(LinkUse::all_reduce)},
                      std::pair{&out.reduce_scatter_gbs, node.rate_gbs(LinkUse::reduce_scatter)},
                      std::pair{&out.all_gather_gbs, node.rate_gbs(LinkUse::all_gather)}})
    if (*r > 0) *r = std::min(*r, n);
  return out;
}

namespace {

// One key of a spec: where it lives in the TOML, the field, its meaning and its lower bound.
struct Key {
  const char* path;
  double* field;
  double min;        // exclusive lower bound unless allow_zero
  bool allow_zero;
  const char* meaning;
};

double number_at(const toml::table& t, const std::string& path, const std::string& source,
                 const char* meaning) {
  const toml::node_view<const toml::node> v = t.at_path(path);
  if (!v)
    fail("{}: missing key `{}` ({}): add it, for example `{} = ...` under its [section]", source,
         path, meaning, path.substr(path.rfind('.') + 1));
  if (auto d = v.value<double>()) {
    // NaN passes every range check (each comparison is false) and inf makes a step take 0 us:
    // neither describes a device.
    if (!std::isfinite(*d))
      fail("{}: `{}` = {} must be a finite number ({})", source, path, *d, meaning);
    return *d;
  }
  fail("{}: `{}` must be a number ({}), got {}", source, path, meaning,
       v.node()->is_string() ? "a string" : "another type");
}

// Every key a spec may have, by section ("" : the top level). A key that is not one of them (a
// typo such as `bandwith_gbs`) would otherwise be ignored while the spec silently kept a value
// the author meant to change.
const std::vector<std::pair<std::string, std::vector<std::string>>>& known_keys() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> keys = {
      {"", {"name", "node", "device", "gemm", "intra_node", "inter_node", "package", "host",
            "attention", "power", "refit"}},
      {"node", {"devices"}},
      {"device", {"memory_gb", "reserved_gb", "peak_tflops_fp32", "peak_tflops_bf16",
                  "peak_tflops_fp16", "memory_bandwidth_gbs", "train_device"}},
      {"gemm", {"max_efficiency", "half_dim"}},
      {"intra_node", {"bandwidth_gbs", "latency_us", "all_reduce_gbs", "reduce_scatter_gbs",
                      "all_gather_gbs", "topology"}},
      {"inter_node", {"bandwidth_gbs", "latency_us", "all_reduce_gbs", "reduce_scatter_gbs",
                      "all_gather_gbs", "multi_rail"}},
      {"package", {"devices", "bandwidth_gbs", "latency_us"}},
      {"host", {"step_overhead_ms"}},
      {"attention", {"tflops"}},
      {"power", {"active_watts", "idle_watts"}},
      {"refit", {"error", "layouts"}},
  };
  return keys;
}

void refuse_unknown_keys(const toml::table& t, const std::string& source) {
  for (const auto& [section, names] : known_keys()) {
    const toml::table* table = section.empty() ? &t : t[section].as_table();
    if (!section.empty() && t.contains(section) && !table)
      fail("{}: `{}` must be a [{}] section", source, section, section);
    if (!table) continue;
    for (const auto& [key, value] : *table) {
      const std::string name(key.str());
      if (std::find(names.begin(), names.end(), name) == names.end())
        fail("{}: unknown key `{}{}`: the known keys{} are {}", source,
             section.empty() ? "" : section + ".", name,
             section.empty() ? " at the top level" : " of [" + section + "]",
             fmt::join(names, ", "));
    }
  }
  if (t.contains("name") && !t["name"].is_string())
    fail("{}: `name` must be a string", source);
}

// The optional sections: [package] (a link tier inside the node), [host], [attention],
// [power] and [refit].
void parse_optional(const toml::table& t, const std::string& source, ClusterSpec& c) {
  // Measured collective rates of a link (LinkSpec): each optional, each > 0 when given.
  for (auto [section, link] : {std::pair{"intra_node", &c.intra_node},
                               std::pair{"inter_node", &c.inter_node}})
    for (auto [key, field] : {std::pair{"all_reduce_gbs", &link->all_reduce_gbs},
                              std::pair{"reduce_scatter_gbs", &link->reduce_scatter_gbs},
                              std::pair{"all_gather_gbs", &link->all_gather_gbs}}) {
      const std::string path = fmt::format("{}.{}", section, key);
      if (!t.at_path(path)) continue;
      *field = number_at(t, path, source, "measured bus GB/s of that collective");
      if (!(*field > 0) || !std::isfinite(*field))
        fail("{}: `{}` = {} must be a finite number > 0 (leave it out to use "
             "`{}.bandwidth_gbs`)",
             source, path, *field, section);
    }
  // The NICs' shape (ClusterSpec::multi_rail): an optional boolean.
  if (const auto v = t.at_path("inter_node.multi_rail")) {
    const std::optional<bool> b = v.value_exact<bool>();
    if (!b) fail("{}: `inter_node.multi_rail` must be true or false", source);
    c.multi_rail = *b;
  }
  if (const auto topology = t.at_path("intra_node.topology")) {
    const std::optional<std::string> name = topology.value<std::string>();
    if (!name || (*name != "switch" && *name != "all-to-all"))
      fail("{}: `intra_node.topology` must be \"switch\" (every pair in a node at the whole "
           "bandwidth, the default) or \"all-to-all\" (direct links, split evenly over the other "
           "devices)",
           source);
    c.intra_node_all_to_all = *name == "all-to-all";
  }
  if (const auto device = t.at_path("device.train_device")) {
    const std::optional<std::string> name = device.value<std::string>();
    if (!name || (*name != "cpu" && *name != "cuda"))
      fail("{}: `device.train_device` must be \"cpu\" or \"cuda\" (the train.device kintsugi "
           "trains these devices with; leave it out for devices it has no backend for)",
           source);
    c.train_device = *name == "cuda" ? Device::cuda : Device::cpu;
  }
  if (t.contains("package")) {
    const double devices = number_at(t, "package.devices", source, "devices per package");
    c.package.bandwidth_gbs =
        number_at(t, "package.bandwidth_gbs", source, "GB/s per device inside a package");
    c.package.latency_us = number_at(t, "package.latency_us", source, "latency in a package");
    if (devices < 1 || devices != static_cast<double>(static_cast<std::int64_t>(devices)) ||
        c.devices_per_node % static_cast<std::int64_t>(devices) != 0)
      fail("{}: `package.devices` = {} must be a whole number dividing `node.devices` = {}",
           source, devices, c.devices_per_node);
    if (c.package.bandwidth_gbs <= 0 || c.package.latency_us < 0)
      fail("{}: `package.bandwidth_gbs` must be > 0 and `package.latency_us` >= 0", source);
    c.devices_per_package = static_cast<std::int64_t>(devices);
  }
  if (t.contains("host")) {
    c.step_overhead_ms = number_at(t, "host.step_overhead_ms", source,
                                   "host time per optimizer step outside the kernels");
    if (c.step_overhead_ms < 0)
      fail("{}: `host.step_overhead_ms` = {} must be >= 0", source, c.step_overhead_ms);
  }
  if (t.contains("attention")) {
    c.attention_tflops = number_at(t, "attention.tflops", source,
                                   "measured TFLOP/s of the attention kernel");
    if (!(c.attention_tflops > 0))
      fail("{}: `attention.tflops` = {} must be > 0 (leave [attention] out to run attention as "
           "GEMMs)",
           source, c.attention_tflops);
  }
  if (t.contains("refit")) {
    c.refit_error = number_at(t, "refit.error", source,
                              "the refit's relative error on its measured steps");
    const double layouts = number_at(t, "refit.layouts", source, "layouts the refit measured");
    if (c.refit_error < 0)
      fail("{}: `refit.error` = {} must be >= 0", source, c.refit_error);
    if (layouts < 1 || layouts != static_cast<double>(static_cast<std::int64_t>(layouts)))
      fail("{}: `refit.layouts` = {} must be a whole number >= 1", source, layouts);
    c.refit_layouts = static_cast<std::int64_t>(layouts);
  }
  if (t.contains("power")) {
    c.active_watts = number_at(t, "power.active_watts", source,
                               "average watts per device over a training step");
    if (!(c.active_watts > 0) || !std::isfinite(c.active_watts))
      fail("{}: `power.active_watts` = {} must be a finite number > 0 (leave [power] out when "
           "the device's power is unknown)",
           source, c.active_watts);
    // Idle is optional inside [power]: not every datasheet gives it.
    if (t.at_path("power.idle_watts")) {
      c.idle_watts = number_at(t, "power.idle_watts", source, "watts per idle device");
      if (!(c.idle_watts > 0) || !std::isfinite(c.idle_watts) || c.idle_watts > c.active_watts)
        fail("{}: `power.idle_watts` = {} must be a finite number > 0 and at most "
             "`power.active_watts` = {}",
             source, c.idle_watts, c.active_watts);
    }
  }
}

}  // namespace

ClusterSpec parse_cluster(const std::string& text, const std::string& source) {
  toml::table t;
  try {
    t = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail("{}: not valid TOML: {} (line {})", source, e.description(), e.source().begin.line);
  }
  refuse_unknown_keys(t, source);
  ClusterSpec c;
  c.source = source;
  c.name = t["name"].value_or(std::string(fs::path(source).stem()));
  double devices = 0;
  const std::vector<Key> keys = {
      {"node.devices", &devices, 0, false, "devices per node"},
      {"device.memory_gb", &c.memory_gb, 0, false, "memory per device in GB"},
      {"device.reserved_gb", &c.reserved_gb, 0, true, "memory per device the framework keeps"},
      {"device.peak_tflops_fp32", &c.peak_tflops_fp32, 0, false, "dense fp32 TFLOP/s"},
      {"device.peak_tflops_bf16", &c.peak_tflops_bf16, 0, false, "dense bf16 TFLOP/s"},
      {"device.peak_tflops_fp16", &c.peak_tflops_fp16, 0, false, "dense fp16 TFLOP/s"},
      {"device.memory_bandwidth_gbs", &c.memory_bandwidth_gbs, 0, false, "memory GB/s"},
      {"gemm.max_efficiency", &c.gemm_max_efficiency, 0, false,
       "fraction of the peak that large GEMMs reach"},
      {"gemm.half_dim", &c.gemm_half_dim, 0, true,
       "GEMM dimension at which efficiency halves"},
      {"intra_node.bandwidth_gbs", &c.intra_node.bandwidth_gbs, 0, false,
       "GB/s per device inside a node"},
      {"intra_node.latency_us", &c.intra_node.latency_us, 0, true, "latency inside a node"},
      {"inter_node.bandwidth_gbs", &c.inter_node.bandwidth_gbs, 0, false,
       "GB/s per device between nodes"},
      {"inter_node.latency_us", &c.inter_node.latency_us, 0, true, "latency between nodes"},
  };
  for (const Key& k : keys) {
    const double v = number_at(t, k.path, source, k.meaning);
    if (v < k.min || (!k.allow_zero && v <= k.min))
      fail("{}: `{}` = {} must be {} ({})", source, k.path, v,
           k.allow_zero ? ">= 0" : "> 0", k.meaning);
    *k.field = v;
  }
  if (devices != static_cast<double>(static_cast<std::int64_t>(devices)))
    fail("{}: `node.devices` = {} must be a whole number", source, devices);
  c.devices_per_node = static_cast<std::int64_t>(devices);
  parse_optional(t, source, c);
  if (c.gemm_max_efficiency > 1)
    fail("{}: `gemm.max_efficiency` = {} is a fraction of the peak: use a value in (0, 1]", source,
         c.gemm_max_efficiency);
  if (c.reserved_gb >= c.memory_gb)
    fail("{}: `device.reserved_gb` = {} leaves nothing of `device.memory_gb` = {}", source,
         c.reserved_gb, c.memory_gb);
  return c;
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const ClusterPreset& p : cluster_presets()) names.emplace_back(p.name);
  names.emplace_back("local");
  return names;
}

ClusterSpec load_cluster(const std::string& name, std::int64_t local_ranks) {
  if (name == "local") return local_cluster(local_ranks);
  // A file the user names comes first; a preset is the copy compiled into the program
  // (plan/cluster_presets.hpp), the same wherever the binary runs.
  std::error_code ec;
  if (!fs::is_regular_file(name, ec)) {
    for (const ClusterPreset& p : cluster_presets())
      if (p.name == name)
        return parse_cluster(std::string(p.toml), fmt::format("configs/clusters/{}.toml", name));
    fail("unknown cluster \"{}\": {}, and not a preset ({})", name,
         fs::exists(name, ec) ? "not a file" : "no such file", fmt::join(cluster_preset_names(), ", "));
  }
  std::ifstream in(name);
  std::stringstream text;
  text << in.rdbuf();
  return parse_cluster(text.str(), name);
}

namespace {

std::string collective_rates_toml(const LinkSpec& link, bool all_to_all = false) {
  std::string out = all_to_all ? "topology = \"all-to-all\"\n" : "";
  for (auto [key, value] : {std::pair{"all_reduce_gbs", link.all_reduce_gbs},
                            std::pair{"reduce_scatter_gbs", link.reduce_scatter_gbs},
                            std::pair{"all_gather_gbs", link.all_gather_gbs}})
    if (value > 0) out += fmt::format("{} = {}\n", key, value);
  return out;
}

}  // namespace

std::string to_toml(const ClusterSpec& c) {
  return fmt::format(
      "name = \"{}\"\n\n[node]\ndevices = {}\n\n[device]\nmemory_gb = {}\nreserved_gb = {}\n"
      "peak_tflops_fp32 = {}\npeak_tflops_bf16 = {}\npeak_tflops_fp16 = {}\n"
      "memory_bandwidth_gbs = {}\n{}\n[gemm]\nmax_efficiency = {}\nhalf_dim = {}\n\n"
      "[intra_node]\nbandwidth_gbs = {}\nlatency_us = {}\n{}\n[inter_node]\nbandwidth_gbs = {}\n"
      "latency_us = {}\n{}{}",
      c.name, c.devices_per_node, c.memory_gb, c.reserved_gb, c.peak_tflops_fp32,
      c.peak_tflops_bf16, c.peak_tflops_fp16, c.memory_bandwidth_gbs,
      c.train_device ? fmt::format("train_device = \"{}\"\n", name_of(*c.train_device)) : "",
      c.gemm_max_efficiency,
      c.gemm_half_dim, c.intra_node.bandwidth_gbs, c.intra_node.latency_us,
      collective_rates_toml(c.intra_node, c.intra_node_all_to_all), c.inter_node.bandwidth_gbs,
      c.inter_node.latency_us, collective_rates_toml(c.inter_node),
      c.multi_rail ? "multi_rail = true\n" : "") +
         (c.devices_per_package > 0
              ? fmt::format("\n[package]\ndevices = {}\nbandwidth_gbs = {}\nlatency_us = {}\n",
                            c.devices_per_package, c.package.bandwidth_gbs,
                            c.package.latency_us)
              : std::string()) +
         (c.step_overhead_ms > 0
              ? fmt::format("\n[host]\nstep_overhead_ms = {}\n", c.step_overhead_ms)
              : std::string()) +
         (c.attention_tflops > 0
              ? fmt::format("\n[attention]\ntflops = {}\n", c.attention_tflops)
              : std::string()) +
         (c.has_power() ? fmt::format("\n[power]\nactive_watts = {}\n", c.active_watts) +
                              (c.idle_watts > 0
                                   ? fmt::format("idle_watts = {}\n", c.idle_watts)
                                   : std::string())
                        : std::string()) +
         (c.refit_layouts > 0 ? fmt::format("\n[refit]\nerror = {}\nlayouts = {}\n",
                                            c.refit_error, c.refit_layouts)
                              : std::string());
}

}  // namespace kintsugi
