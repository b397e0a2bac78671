#!/usr/bin/env bash
# The layout flags come from the config key table (docs/parallelism.md, "Layout flags"): every
# parallel.* key that `train --help-config` lists is a flag of train and eval named after it,
# with the key named in its help, and plan pins the search with the same names.
# Usage: layout_flags.sh KINTSUGI
set -euo pipefail
kintsugi="$1"
mapfile -t keys < <("$kintsugi" train --help-config | awk '$1 ~ /^parallel\./ {print $1}')
((${#keys[@]} >= 10)) || { echo "FAIL: only ${#keys[@]} parallel.* keys in --help-config"; exit 1; }
train_help=$("$kintsugi" train --help)
eval_help=$("$kintsugi" eval --help)
plan_help=$("$kintsugi" plan --help)
for key in "${keys[@]}"; do
  name=${key#parallel.}
  flag="--${name//_/-}"
  for cmd in train eval; do
    help_var="${cmd}_help"
    grep -qE -- "^ *${flag}[ {=]" <<<"${!help_var}" || { echo "FAIL: $cmd has no $flag for $key"; exit 1; }
    grep -qE -- "\\(${key//./\\.}[);]" <<<"${!help_var}" || { echo "FAIL: $cmd's $flag does not name $key"; exit 1; }
  done
done
# Every layout key a planner chooses is a pin, with no list of them here: all but what a run sets
# (the rank order, the stage sizes, context parallelism's exchange) and the bucket size, which is
# no layout field.
for key in "${keys[@]}"; do
  case "$key" in parallel.order|parallel.layers_per_stage|parallel.cp_comm|parallel.bucket_mib) continue ;; esac
  name=${key#parallel.}
  flag="--${name//_/-}"
  grep -qE -- "^ *${flag}[ {=]" <<<"$plan_help" || { echo "FAIL: plan has no pin $flag"; exit 1; }
  grep -qF -- "Pin $key (" <<<"$plan_help" || { echo "FAIL: plan's $flag does not pin $key"; exit 1; }
done
# The old spellings are gone: one name per knob.
for old in --sp --grid-overlap; do
  if grep -qE -- "^ *${old}[ {=]" <<<"$plan_help"; then echo "FAIL: plan still has $old"; exit 1; fi
done
echo "ok: ${#keys[@]} parallel.* keys are flags of train and eval; plan pins the layout by the same names"
