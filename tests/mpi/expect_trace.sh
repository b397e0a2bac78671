#!/usr/bin/env bash
# --trace writes one Chrome trace of the last step with every rank's forward and backward of
# every micro-batch, the waits and the optimizer, and the in-flight counter.
# Usage: expect_trace.sh KINTSUGI OUT_DIR [train flags...]
set -euo pipefail
kintsugi="$1" out="$2"
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
trace="$out/traced/trace.json"
rm -rf "$out/traced"
mpirun -q -np 4 --oversubscribe --bind-to none "$kintsugi" train "$@" --pp 2 --dp 2 \
  --schedule 1f1b --out "$out/traced" --trace "$trace" >/dev/null
fail() { echo "FAIL: $*"; exit 1; }
[[ -s "$trace" ]] || fail "no trace at $trace"
grep -q '"traceEvents"' "$trace" || fail "not a Chrome trace"
# 4 ranks x 4 micro-batches (8 sequences / dp 2 / micro-batch 1), forward and backward each.
for rank in 0 1 2 3; do
  for mb in 0 1 2 3; do
    for kind in F B; do
      grep -Eq "\"name\":\"$kind c[0-9]+ mb$mb\",\"ph\":\"X\",\"pid\":$rank|\"name\":\"$kind c[0-9]+ mb$mb\"[^}]*\"pid\":$rank[,}]" "$trace" ||
        fail "rank $rank has no $kind event of micro-batch $mb"
    done
  done
done
grep -q '"name":"optimizer"' "$trace" || fail "no optimizer event"
grep -q '"name":"wait activation' "$trace" || fail "no wait for an activation"
grep -q '"name":"micro-batches in flight"' "$trace" || fail "no in-flight counter"
echo "ok: $(grep -o '"ph":"X"' "$trace" | wc -l) events in $trace"
