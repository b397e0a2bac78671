#pragma once
// Faults the tests inject into a run: options the library takes like any other, each off unless
// set. A unit test sets them directly; the shell tests set KINTSUGI_TEST_* switches
// (switches.hpp) on the programs they launch, which `kintsugi` turns into this struct at its
// entry (fault_hooks_from). No code below the program reads the environment for them.
#include <cstdint>
#include <optional>
#include <string>

#include "kintsugi/core/switches.hpp"

namespace kintsugi {

struct RankStep {
  int rank = 0;
  std::int64_t step = 0;
};

// Every training micro-batch (of steps from_step and later, counted from 1 as the log counts
// them; 0: all) or every evaluation micro-batch after the first step takes `ms` longer.
struct SlowMicroBatches {
  bool evaluation = false;
  int ms = 0;
  std::int64_t from_step = 0;
};

// That world rank stops itself (SIGSTOP) before MPI initialisation ("init") or the node split
// ("split"), where no timeout of MPI's own would notice it.
struct StopAtStart {
  int rank = 0;
  std::string where;
};

struct FaultHooks {
  std::optional<RankStep> kill_rank;    // that rank of train kills itself at that step
  std::optional<RankStep> die_in_save;  // ... dies after writing its shard of that checkpoint
  std::optional<SlowMicroBatches> slow_micro_batches;
  std::optional<StopAtStart> stop_at_start;
  std::string powercap_root;  // RAPL's tree for train ("": /sys/class/powercap)
};

// The hooks the KINTSUGI_TEST_* switches ask for (the table has checked their form).
FaultHooks fault_hooks_from(const Switches& switches);

}  // namespace kintsugi
