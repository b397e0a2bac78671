#!/usr/bin/env bash
# `kintsugi plan --json` prints one JSON document whose layouts are valid (tp x pp x dp = the
# world), fit in memory and come fastest first; with none fitting, the smallest are predicted
# anyway and marked "does not fit: needs X GB of Y".
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
# A layout that does not fit is still predicted, marked with what it needs (and plan fails).
if "$1" plan --model gpt-1t --cluster dgx-a100-80gb --nodes 1 --global-batch 8 --seq 2048 \
  --json > "${TMPDIR:-/tmp}/plan_not_fitting.$$.json" 2>/dev/null; then
  echo "plan of a layout that does not fit succeeded"; exit 1
fi
python3 -c '
import json, re, sys
d = json.load(open(sys.argv[1]))
assert d["layouts"] == [] and d["not_fitting"], d
for p in d["not_fitting"]:
    assert not p["fits"] and p["step_seconds"]["total"] > 0, p
    m = re.fullmatch(r"needs ([0-9.]+) GB of 80", p["does_not_fit"])
    assert m and float(m.group(1)) > 80, p["does_not_fit"]
print("ok: not fitting", d["not_fitting"][0]["does_not_fit"])
' "${TMPDIR:-/tmp}/plan_not_fitting.$$.json"
rm -f "${TMPDIR:-/tmp}/plan_not_fitting.$$.json"
