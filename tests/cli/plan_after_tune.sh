#!/usr/bin/env bash
# Plan -> tune -> plan closes (docs/planner.md "What the refit fits, and what it cannot"): the
# plan on the cluster `tune` refit (the spec it writes into its --out) ranks first the layout
# tune measured fastest (its JSON report there), or its note says that #1 to #N tie and the
# measured fastest is one of them.
# Usage: plan_after_tune.sh KINTSUGI TUNE_DIR [plan flags: the tuned run's --config/--set ...]
set -euo pipefail
kintsugi="$1" dir="$2"
shift 2
best=$(python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(j["layouts"][j["best"]]["layout"])' \
  "$dir/tune.json")
# --wide: every layout on its own row, its text whole (the default table merges and wraps).
out=$("$kintsugi" plan "$@" --cluster "$dir/cluster-refit.toml" --top 1000 --wide --write-config "$dir/plan.toml")
printf '%s\n' "$out" | sed -n '1,8p'
# The rank of a layout in the table: its row is "  K <layout text>   <figures>". awk reads to
# the end (no early exit): under pipefail, printf would die of SIGPIPE writing a long table.
rank=$(printf '%s\n' "$out" | awk -v want="$best" '
  match($0, /^ *[0-9]+ /) {
    k = $1; text = substr($0, RLENGTH + 1); sub(/  .*/, "", text)
    if (text == want && found == "") found = k
  }
  END { if (found != "") print found }')
[[ -n "$rank" ]] || { echo "the measured fastest, $best, is not in the plan"; exit 1; }
if [[ "$rank" == 1 ]]; then
  echo "ok: the refit plan's #1 is the measured fastest, $best"
  exit 0
fi
ties=$(printf '%s\n' "$out" | sed -n 's/^note: #1-#\([0-9]*\) tie: .*/\1/p')
printf '%s\n' "$out" | grep '^note: #1-#' || true
if [[ -n "$ties" && "$rank" -le "$ties" ]]; then
  echo "ok: the measured fastest, $best, is #$rank, which ties with #1 (#1-#$ties tie)"
  exit 0
fi
echo "the refit plan ranks the measured fastest, $best, #$rank, and does not say it ties with #1"
exit 1
