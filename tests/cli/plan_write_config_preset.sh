#!/usr/bin/env bash
# `kintsugi plan --write-config` of a preset writes the run the plan describes: the budget's
# steps, the cluster's device, a checkpoint every hour of predicted time, and placeholders for
# the data, which `kintsugi train` refuses by key until they are set.
# Usage: plan_write_config_preset.sh KINTSUGI OUT_DIR
set -euo pipefail
kintsugi="$1" out="$2"
rm -rf "$out" && mkdir -p "$out"
cd "$out"
printed="$("$kintsugi" plan --model llama-13b --cluster dgx-h100 --nodes 8 --global-batch 512 \
  --seq 2048 --tokens 1e12 --top 1 --write-config best.toml)"
summary="$(grep '^wrote the best layout' <<<"$printed")"
echo "$summary"
value() { sed -n "/^\[$1\]/,/^\[/s/^$2 = //p" best.toml | tr -d "'\""; }  # strings unquoted
# 1e12 tokens / (512 x 2048) = 953,674.3 steps: 953,675 train the whole budget.
[[ "$(value train steps)" == 953675 ]] || { echo "FAIL: train.steps = $(value train steps)"; exit 1; }
[[ "$(value train device)" == cuda ]] || { echo "FAIL: train.device = $(value train device)"; exit 1; }
[[ "$(value train global_batch)" == 512 ]] || { echo "FAIL: global_batch"; exit 1; }
# An hour of the predicted step: 3600 / step seconds, as the header states the step.
step="$(sed -n 's/^# .*predicted \([0-9.e+-]*\) s per step\.$/\1/p' best.toml)"
save="$(value train save_every)"
python3 -c "import sys; s, n = float(sys.argv[1]), int(sys.argv[2]); assert n == int(3600 / s) or abs(n - 3600 / s) <= 0.01 * n, (s, n)" "$step" "$save" ||
  { echo "FAIL: train.save_every = $save for a step of $step s"; exit 1; }
for key in train val tokenizer; do
  value data "$key" | grep -q '^<set me: ' || { echo "FAIL: data.$key = $(value data "$key")"; exit 1; }
done
grep -q "set data.train, data.val, data.tokenizer (placeholders .kintsugi train. refuses), then launch 64 ranks: mpirun -np 64 -N 8 --hostfile HOSTS" <<<"$summary" ||
  { echo "FAIL: the summary line: $summary"; exit 1; }
# train refuses the placeholder by key, before the layout or the device are looked at.
if msg="$("$kintsugi" train --config best.toml 2>&1)"; then echo "FAIL: train ran"; exit 1; fi
grep -q '^kintsugi: error: data.train = "<set me: .*" is a placeholder .*--set data.train=PATH' <<<"$msg" ||
  { echo "FAIL: $msg"; exit 1; }
if msg="$("$kintsugi" train --config best.toml --set data.train=a.bin --set data.val=b.bin 2>&1)"; then
  echo "FAIL: train ran"; exit 1
fi
grep -q 'data.tokenizer = "<set me: ' <<<"$msg" || { echo "FAIL: $msg"; exit 1; }
echo "ok: the plan's run, its data left to set"
