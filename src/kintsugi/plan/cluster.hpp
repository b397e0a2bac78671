#pragma once
// A cluster as the planner sees it: devices per node, each device's dense peak per dtype and
// memory, the links inside and between nodes, and the GEMM-efficiency curve. Specs are TOML
// files (the presets, configs/clusters/*.toml, are compiled in); `local` is this machine, built
// from measurements (local_cluster.hpp).
//
// GEMM efficiency (the fraction of the dense peak a GEMM of m x k times k x n reaches):
//   eff(m, n, k) = gemm_max_efficiency * m/(m + h) * n/(n + h) * k/(k + h),  h = gemm_half_dim
// saturating in each dimension: large GEMMs approach gemm_max_efficiency, a dimension of h
// halves it. `kintsugi tune` refits gemm_max_efficiency from measured steps.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/core/device.hpp"
#include "kintsugi/core/precision.hpp"

namespace kintsugi {

// What a link carries, for the rate it runs at.
enum class LinkUse { transfer, all_reduce, reduce_scatter, all_gather };

struct LinkSpec {
  double bandwidth_gbs = 0;  // GB/s (1e9 bytes) each device can send over the link
  double latency_us = 0;     // per message
  // Optional: the bus bandwidth a collective was measured to reach over this link (the bytes
  // each device must send over the time, as `kintsugi bench comm` reports it), where the
  // communication library runs it at another rate than its transfers; 0: bandwidth_gbs.
  double all_reduce_gbs = 0, reduce_scatter_gbs = 0, all_gather_gbs = 0;
  double rate_gbs(LinkUse use) const;
};

struct ClusterSpec {
  std::string name;
  std::string source;          // where it came from, for messages
  std::int64_t devices_per_node = 0;
  double memory_gb = 0;        // per device (1e9 bytes)
  double reserved_gb = 0;      // per device: runtime, kernels, fragmentation
  double peak_tflops_fp32 = 0, peak_tflops_bf16 = 0, peak_tflops_fp16 = 0;  // dense, per device
  double memory_bandwidth_gbs = 0;  // device memory: bounds the optimizer step
  // [device] train_device: the train.device kintsugi trains these devices with ("cpu", "cuda");
  // none for devices it has no backend for (Gaudi2, MI250X): plan --write-config refuses them.
  std::optional<Device> train_device;
  double gemm_max_efficiency = 0;
  double gemm_half_dim = 0;
  LinkSpec intra_node, inter_node;
  // [intra_node] topology: "switch" (false, the default: any group or pair inside a node gets
  // the whole intra_node bandwidth, as through NVSwitch) or "all-to-all" (true: the bandwidth is
  // the sum of direct links to each of the node's other devices, split evenly, so a group of k
  // devices can use only the links among them, (k - 1) / (devices_per_node - 1) of it; Gaudi2's
  // 21 scale-up ports are 3 per peer).
  bool intra_node_all_to_all = false;
  // Optional tier inside a node ([package]): groups of this many consecutive devices (a
  // Frontier MI250X's two GCDs) share a faster link than other pairs in the node; 0: none.
  std::int64_t devices_per_package = 0;
  LinkSpec package;
  // multi_rail ([inter_node] multi_rail = true; false unless the spec sets it, as
  // perlmutter.toml does; docs/planner.md "Cluster specs"): every device has its own share of
  // the node's NICs and the communication library runs a ring's channels over all of them, so a
  // ring with m devices in each node it spans runs at m times inter_node's rate (at most the
  // rate of a ring over m devices inside a node).
  bool multi_rail = false;
  double step_overhead_ms = 0;  // [host]: host work per optimizer step outside the kernels
  // [attention]: the measured rate of the attention kernel in use (TFLOP/s of the attention
  // core, QK^T and PV forward and backward counted over the full s x s, as flops.hpp counts
  // them), for a kernel that does not run at the GEMM curve's efficiency (kintsugi's CUDA
  // attention runs on CUDA cores: docs/planner.md); 0: the attention core runs as GEMMs.
  double attention_tflops = 0;
  // [power]: watts per device, for a campaign's energy (plan/campaign.hpp). active_watts is the
  // average a device draws over a training step (its compute and its waits together, as the
  // Frontier study averaged rocm-smi over iterations); idle_watts what it draws doing nothing
  // (informational: the active average already contains the waits). 0: not given, the energy
  // is unknown (never printed as 0).
  double active_watts = 0, idle_watts = 0;
  bool has_power() const { return active_watts > 0; }
  // [refit]: written by `kintsugi tune` (plan/refit.hpp): the refit's error (every measured
  // step within a factor 1 +- refit_error of its prediction) and the layouts it measured; 0:
  // not a refit. Predictions closer than that error cannot be ordered: `plan` says they tie.
  double refit_error = 0;
  std::int64_t refit_layouts = 0;

  double peak_tflops(Precision precision) const;
  double gemm_efficiency(double m, double n, double k) const;
  // The link a group of `members` devices runs at when it crosses nodes (inter_node) or not
  // (intra_node, its share of an all-to-all node's links); no package tier.
  LinkSpec node_link(bool crosses_nodes, std::int64_t members) const;
  // The link a ring over these device indices runs at: the slowest between two neighbours
  // (inside a package, inside a node, or between nodes).
  LinkSpec group_link(const std::vector<int>& devices) const;
  // The same link with the rate a ring reaches across nodes with multi_rail; group_link's own
  // otherwise (an all-to-all node's share already is).
  LinkSpec ring_link(const std::vector<int>& devices) const;
};

// Parses a cluster spec; every missing or out-of-range key is an Error naming the key and the
// file. `source` names the text in messages.
ClusterSpec parse_cluster(const std::string& toml_text, const std::string& source);
// A path to a TOML file, a preset name ("dgx-a100-80gb", "dgx-h100", "frontier", "gaudi2",
// "perlmutter": configs/clusters/, compiled in), or "local" (this machine, from measurements,
// its cores shared by `local_ranks` ranks; 0: one rank per core).
ClusterSpec load_cluster(const std::string& name_or_path, std::int64_t local_ranks = 0);
std::vector<std::string> cluster_preset_names();
// The cluster spec as TOML (what `tune` writes after refitting).
std::string to_toml(const ClusterSpec& c);

}  // namespace kintsugi
