#pragma once
// The environment switches: every KINTSUGI_* variable the program reads, in one table (name,
// kind, default, the values it takes, what it does, where it was measured or why it exists),
// read once per process and checked. A value a switch does not take is refused in one line,
// never read as some other value. `kintsugi --help-switches` lists them, run.json and the
// bench JSON record them, docs/switches.md documents them (CTest docs.lists keeps it in step).
//
// The KINTSUGI_TEST_* switches are how the shell tests tell a launched program which fault to
// inject; the program turns them into a FaultHooks struct (fault_hooks.hpp) that the library
// takes as an option, so no code below the program reads them.
#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kintsugi/core/enum_names.hpp"

namespace kintsugi {

// In the table's order (switches.cpp).
enum class Switch {
  gemm_blocks,
  typed_kernels,
  gemm_bgrad,
  gemm_gelu,
  gemm_autotune,
  tensor_core_attention,
  attn_tile_masks,
  attn_skip_masked,
  attn_heavy_first,
  attn_bwd_fused,
  attn_bwd_more_blocks,
  attn_bwd_dkdv_passes,
  attn_bwd_scratch_mib,
  attn_cudnn,
  cuda_sync,
  fused_loss,
  multi_tensor,
  profile_events,
  energy,
  mpi_reduce_scatter,
  keep_freed_memory,
  startup_timeout_s,
  test_kill_rank,
  test_die_in_save,
  test_slow_micro_batches,
  test_stop_at_start,
  test_powercap_root,
};
inline constexpr std::size_t kSwitchCount = 27;

// flag: 0 or 1. integer: whole numbers (and, where the default is a word such as "auto", that
// word). seconds: a positive number of seconds, at most 1e9. choice: one of the words `values`
// lists. text: a value of the form `values` gives. path: any non-empty path.
enum class SwitchKind { flag, integer, seconds, choice, text, path };
template <>
struct EnumNames<SwitchKind> {
  static constexpr std::array values = {
      std::pair{SwitchKind::flag, "flag"},       std::pair{SwitchKind::integer, "integer"},
      std::pair{SwitchKind::seconds, "seconds"}, std::pair{SwitchKind::choice, "choice"},
      std::pair{SwitchKind::text, "text"},       std::pair{SwitchKind::path, "path"}};
};

struct SwitchSpec {
  Switch id;
  std::string_view name;           // KINTSUGI_...
  SwitchKind kind;
  std::string_view default_value;  // what unset (or empty) means; "" for a hook: none
  std::string_view values;         // what it takes: a regular expression the whole value matches
  std::string_view description;    // what it does
  std::string_view reference;      // where it was measured, or why it exists
};

std::span<const SwitchSpec> switch_specs();
const SwitchSpec& spec_of(Switch s);

class Switches {
 public:
  // `environment`: variable -> value; a switch it lacks, or gives as "", takes its default.
  // kintsugi::Error names the first switch given a value it does not take, and what it takes.
  explicit Switches(const std::map<std::string, std::string>& environment = {});
  // The process environment's, read at the first call (thread-safe) and kept: `kintsugi`
  // calls it first, so that a refused value ends the program before any work.
  static const Switches& process();

  bool on(Switch s) const;                               // flag
  std::optional<std::int64_t> integer(Switch s) const;  // integer; nullopt: its word ("auto")
  double seconds(Switch s) const;                        // seconds
  const std::string& text(Switch s) const;  // choice, text, path: the value ("": a hook unset)
  bool is_set(Switch s) const;              // given a value, not taking its default

  // Every switch's value, set or default, by name: run.json and the bench JSON record it.
  nlohmann::json to_json() const;
  // The listing `kintsugi --help-switches` prints: per switch its name, value (marked when
  // set), kind, default and the values it takes, then what it does and where it was measured.
  std::string describe() const;

 private:
  std::array<std::string, kSwitchCount> values_;
  std::array<bool, kSwitchCount> set_{};
};

}  // namespace kintsugi
