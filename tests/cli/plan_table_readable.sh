#!/usr/bin/env bash
# plan's table for people: within 100 columns, no exponents in its rows, layouts with the same
# figures that differ in one word on one row ("1-2 ... zero2/1"), a 1 x N x 1 grid (the 1D
# layout) never ranked as a grid; --wide has every column and every layout.
# Usage: plan_table_readable.sh KINTSUGI
set -euo pipefail
kintsugi="$1"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
# The campaign search of docs/planner.md: nodes, batches, a budget, the Pareto front.
campaign=(plan --model gpt-175b --cluster frontier --nodes 16:128:x2 --global-batch 512,1024
          --seq 2048 --precision fp16 --tokens-per-param 20 --objective time --top 20)
for args in "plan --model llama-13b --cluster gaudi2 --nodes 8 --global-batch 256 --seq 2048 --top 30" \
            "${campaign[*]}" \
            "plan --model gpt2 --cluster dgx-h100 --tensor-grid none any --top 50"; do
  out="$("$kintsugi" $args)"
  # Rows of the tables: a rank (or ranks 2-4) then the layout or the run's columns.
  rows="$(grep -E '^ *[0-9]+(-[0-9]+)? .*tp [0-9]' <<<"$out" || true)"
  [[ -n "$rows" ]] || fail "no rows: $args"
  # The tables' rows and headers, and their legends (prose above them may wrap).
  wide="$(sed -n '/^ *# /,$p' <<<"$out" | awk 'length($0) > 100')"
  [[ -z "$wide" ]] || fail "lines over 100 columns in '$args':"$'\n'"$wide"
  ! grep -Eq '[0-9]e[+-][0-9]' <<<"$rows" || fail "an exponent in a row of '$args': $(grep -E '[0-9]e[+-][0-9]' <<<"$rows")"
done
# Ties merged: GPT-2's ZeRO-1 and ZeRO-2 layouts take the same step, on one row with the
# memory as a range.
out="$("$kintsugi" plan --model gpt2 --cluster dgx-h100 --global-batch 512 --top 10)"
grep -Eq '^ *1-2 tp 1 pp 1 dp 8 mb 64 zero2/1 +[0-9.]+-[0-9.]+ ' <<<"$out" || fail "no merged row: $out"
grep -q '^1-2 ... zero2/1: layouts ranked together with the same times' <<<"$out" || fail "no legend of merged rows"
# --wide: the full breakdown, one row per layout, ranks 1..30.
wide="$("$kintsugi" plan --model llama-13b --cluster gaudi2 --nodes 8 --global-batch 256 --seq 2048 --top 30 --wide)"
grep -Eq '^ +# +layout .*compute +tp +pp +dp +cp +ep +bubble +optim +host +tokens/s +samples/s +MFU +HFU$' <<<"$wide" ||
  fail "--wide's header: $(grep -m1 ' # ' <<<"$wide")"
[[ "$(grep -Ec '^ *[0-9]+ +tp ' <<<"$wide")" == 30 ]] || fail "--wide does not list 30 layouts"
# The 1D layout is searched as such; 1 x N x 1 is not ranked beside it.
grids="$("$kintsugi" plan --model gpt2 --cluster dgx-h100 --tensor-grid none any --top 100000 --wide)"
! grep -Eq 'grid 1x[0-9]+x1 ' <<<"$grids" || fail "a 1xNx1 grid ranked: $(grep -Em1 'grid 1x[0-9]+x1 ' <<<"$grids")"
grep -Eq 'grid [2-9]x1x1 ' <<<"$grids" || fail "no Nx1x1 grid (a layout of its own)"
((failed == 0)) && echo "tables within 100 columns, rounded, ties merged, no 1xNx1 grid"
exit "$failed"
