#!/usr/bin/env bash
# `kintsugi plan --write-config` writes the best layout as a run config that loads and trains.
# Usage: plan_write_config.sh KINTSUGI OUT_DIR CONFIG [--set key=value ...]
set -euo pipefail
bin="$1" out="$2" config="$3"
shift 3
rm -rf "$out" && mkdir -p "$out"
"$bin" plan --config "$config" "$@" --cluster local --ranks 1 --write-config "$out/best.toml"
grep -q '^\[parallel\]' "$out/best.toml"
OMP_NUM_THREADS=1 "$bin" train --config "$out/best.toml" --set train.steps=1 \
  --set train.warmup_steps=1 --set train.save_checkpoint=false --out "$out/run"
test "$(grep -c '"loss":' "$out/run/metrics.jsonl" || true)" -eq 1
