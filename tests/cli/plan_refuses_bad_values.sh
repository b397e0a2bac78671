#!/usr/bin/env bash
# plan's flags: a value that is empty, 0 where 0 means "not given", negative or not finite is
# refused in one line naming the flag and the value the user gave (never taken as "not given",
# never blamed on a flag nobody gave), and a flag the mode would ignore is refused by name.
# Usage: plan_refuses_bad_values.sh KINTSUGI EXPECT_ERROR
set -euo pipefail
kintsugi="$1" expect="$2"
plan=("$kintsugi" plan --model gpt2 --cluster dgx-h100)
failed=0
check() {  # PATTERN ARGS...
  local pattern="$1"
  shift
  "$expect" "$pattern" "$@" || failed=1
}
for value in 0 -5 nan inf; do
  check "^kintsugi: error: --tokens $value must be a finite number above 0" "${plan[@]}" --tokens "$value"
done
check "^kintsugi: error: --tokens-per-param -1 must be a finite number above 0" "${plan[@]}" --tokens-per-param -1
check "^kintsugi: error: --tokens-per-param nan must be" "${plan[@]}" --tokens-per-param nan
check "^kintsugi: error: --rampup-tokens nan must be" "${plan[@]}" --rampup-tokens nan
check "^kintsugi: error: --critical-batch-loss 0 must be" "${plan[@]}" --critical-batch-loss 0
check "^kintsugi: error: --tokens '4e9x' is not a number" "${plan[@]}" --tokens 4e9x
for flag in --model --cluster --global-batch --tp --write-config; do
  check "^kintsugi: error: $flag '' is empty: give it a value, or drop $flag for its default" \
    "$kintsugi" plan "$flag" ''
done
for flag in --max-global-batch --max-nodes; do
  check "^kintsugi: error: $flag -1 is not a whole number of at least 0" "${plan[@]}" "$flag" -1
done
check "^kintsugi: error: --top 0 is not a whole number of at least 1" "${plan[@]}" --top 0
check "^kintsugi: error: --top -1 is not a whole number of at least 1" "${plan[@]}" --top -1
# The critical batch blamed, not --max-global-batch 1 (L = 50: 1 sequence).
check "no global batch \(--global-batch 256\) is within --critical-batch-loss 50 \(its critical batch" \
  "${plan[@]}" --global-batch 256 --critical-batch-loss 50
check "no global batch \(--global-batch 256,512\) is within --max-global-batch 128" \
  "${plan[@]}" --global-batch 256,512 --max-global-batch 128
# Flags a mode would ignore.
check "plan --memory takes only --model, --precision and --grad-precision, not --json" \
  "$kintsugi" plan --memory --json
check "plan --memory takes only .* not --cluster" "$kintsugi" plan --memory --cluster dgx-h100
check "--plot p.svg draws a --scaling curve: add --scaling strong or weak" "${plan[@]}" --plot p.svg
check "--scaling draws a curve of each node count's fastest layout; --write-config is for" \
  "${plan[@]}" --scaling strong --nodes 1,2 --write-config x.toml
check "--write-config: kintsugi does not train on the devices of cluster gaudi2" \
  "$kintsugi" plan --model gpt2 --cluster gaudi2 --write-config x.toml
# A loss so small that its critical batch passes any batch (4e22 tokens): no limit, no refusal.
out="$("${plan[@]}" --critical-batch-loss 0.001 --top 1)" || { echo "FAIL: L = 0.001: $out"; exit 1; }
grep -q "critical batch at loss 0.001 nats/token: .* = 3.86[0-9]*e+22 tokens .*: above any global batch, none is left out" <<<"$out" ||
  { echo "FAIL: L = 0.001: $out"; failed=1; }
((failed == 0)) && echo "every bad value refused by name"
exit "$failed"
