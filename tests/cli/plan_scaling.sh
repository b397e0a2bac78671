#!/usr/bin/env bash
# `kintsugi plan --scaling strong` prints one row per node count with its efficiency and writes
# the curve as an SVG; --json gives the same points.
# Usage: plan_scaling.sh KINTSUGI OUT_DIR
set -euo pipefail
mkdir -p "$2"
rm -f "$2/scaling.svg"
F="--cluster frontier --seq 2048 --precision fp16 --micro-batch 1 --schedule 1f1b --recompute full
   --sequence-parallel=false --zero 1 --hsdp 0 --model gpt-175b --global-batch 8000 --tp 4 --pp 16"
out=$("$1" plan --scaling strong --nodes 16:128:x2 $F --plot "$2/scaling.svg")
echo "$out"
grep -Eq "^ +16 +128 +8000 tp 4 pp 16 dp 2 .* 100\.0%$" <<<"$out"
grep -Eq "^ +128 +1024 +8000 tp 4 pp 16 dp 16 .* 9[0-9]\.[0-9]%$" <<<"$out"
grep -q "<polyline" "$2/scaling.svg"
grep -q "strong scaling: gpt-175b on frontier" "$2/scaling.svg"
[ "$(grep -c "<circle" "$2/scaling.svg")" -eq 8 ]  # 4 points, predicted and ideal
"$1" plan --scaling weak --nodes 16,32 $F --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["points"]
assert d["scaling"] == "weak" and [x["global_batch"] for x in p] == [8000, 16000], p
assert p[0]["efficiency"] == 1 and 0.9 < p[1]["efficiency"] <= 1, p
print("ok: weak", p[1]["efficiency"])
'
