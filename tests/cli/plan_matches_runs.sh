#!/usr/bin/env bash
# The planner's memory prediction for the first pipeline stage equals what the multi-rank runs
# recorded as their rank 0's theory (run.json's memory_bytes_theory, itself held to the
# tracked bytes by check_run): parameters, gradients, optimizer state and activations, for
# layouts with tp, pp, dp, sp and ZeRO.
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
plan = json.load(sys.stdin)["layouts"][0]["memory_bytes_first_stage"]
run = json.load(open(sys.argv[1]))["memory_bytes_theory"]
bad = {k: (plan[k], run[k]) for k in run if plan[k] != run[k]}
print(sys.argv[2], "matches" if not bad else f"differs (plan, run): {bad}")
sys.exit(1 if bad else 0)
' "$run" "$name" || status=1
done
exit $status
