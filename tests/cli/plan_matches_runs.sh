#!/usr/bin/env bash
# The planner's memory prediction for the first pipeline stage equals what the multi-rank runs
# recorded as their rank 0's theory (run.json's memory_bytes_theory, itself held to the
# tracked bytes by check_run): parameters, gradients, optimizer state and activations, for
# layouts with tp, pp, dp, sp, ZeRO and 3D tensor grids; and the bytes the planner predicts
# rank 0 sends per step, per group and collective, equal what its communicator counted in the
# run's first training step (metrics.jsonl), within check_run comm's 64 bytes of rounding. The
# expert-parallel all-to-all follows the routing, which the planner takes as balanced: it must
# equal the run's balanced theory (run.json; the step's own is held to the counters by check_run).
# Usage: plan_matches_runs.sh KINTSUGI RUNS_DIR MICRO_RUN_ARGS... -- NAME:RANKS:"PLAN ARGS" ...
set -euo pipefail
bin="$1" runs="$2"
shift 2
micro=()
while [[ "$1" != "--" ]]; do micro+=("$1"); shift; done
shift
status=0
for spec in "$@"; do
  IFS=: read -r name ranks args <<< "$spec"
  run="$runs/$name/run.json"
  if [[ ! -f "$run" ]]; then echo "$run is missing: run ctest -R mpi.$name first"; exit 1; fi
  # shellcheck disable=SC2086
  "$bin" plan "${micro[@]}" --cluster local --ranks "$ranks" --top 1 --json $args |
    python3 -c '
import json, sys
layout = json.load(sys.stdin)["layouts"][0]
plan = layout["memory_bytes_first_stage"]
run = json.load(open(sys.argv[1]))["memory_bytes_theory"]
bad = {k: (plan[k], run[k]) for k in run if plan[k] != run[k]}
steps = [json.loads(line) for line in open(sys.argv[3])]
counted = next(s for s in steps if "loss" in s).get("comm_bytes_sent", {})
predicted = layout["comm_bytes_per_step_first_stage"]
balanced = json.load(open(sys.argv[1]))["comm_bytes_per_step_theory"]
routed = {"ep.all_to_all"}
counted = {k: balanced.get(k, 0) if k in routed else v for k, v in counted.items()}
bad.update({k: (predicted.get(k, 0), counted.get(k, 0)) for k in set(predicted) | set(counted)
            if abs(predicted.get(k, 0) - counted.get(k, 0)) > 64})
print(sys.argv[2], "matches" if not bad else f"differs (plan, run): {bad}")
sys.exit(1 if bad else 0)
' "$run" "$name" "$runs/$name/metrics.jsonl" || status=1
done
exit $status
