#!/usr/bin/env bash
# `kintsugi plan --json` prints one JSON document whose layouts are valid (tp x pp x dp = the
# world), fit in memory and come fastest first.
# Usage: plan_json.sh KINTSUGI
set -euo pipefail
"$1" plan --model llama-13b --cluster gaudi2 --nodes 8 --global-batch 256 --seq 2048 --top 5 \
  --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["world"] == 64 and d["enumerated"] >= d["fitting"] > 0, d
layouts = d["layouts"]
assert len(layouts) == 5, len(layouts)
for p in layouts:
    l = p["layout"]
    assert l["tp"] * l["pp"] * l["dp"] == 64, l
    assert 40 % l["tp"] == 0, l
    assert p["fits"] and p["memory_bytes"]["total"] <= 96e9, p
    parts = sum(v for k, v in p["step_seconds"].items() if k != "total")
    assert abs(parts - p["step_seconds"]["total"]) < 1e-9 * parts, p
    assert 0 < p["mfu"] < 1, p
times = [p["step_seconds"]["total"] for p in layouts]
assert times == sorted(times), times
print("ok", layouts[0]["layout"], layouts[0]["samples_per_s"])
'
