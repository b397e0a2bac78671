#!/usr/bin/env bash
# 1D against 3D tensor parallelism at equal rank count on this machine, each measured step time
# beside the planner's prediction for the local cluster (docs/planner.md, "3D tensor
# parallelism in the planner"; docs/benchmarks.md holds the recorded table). Four ranks
# oversubscribing the cores train gpt-tiny (4 layers, d_model 128, 4 heads, seq 128; global
# batch 8 of micro-batches of 2) for a few steps in each layout: tp 4, tp 2 x dp 2, dp 4 and the
# grids 2x2x1, 1x2x2, 2x1x2, 1x4x1, 4x1x1 and 2x1x1 x dp 2. Measured: the median step time of
# steps 2 on (metrics.jsonl); predicted: `kintsugi plan --cluster local --ranks 4` pinned to
# the same layout (its links and GEMM rate as `kintsugi bench comm` / `bench gemm` cached them).
#
# Usage: bench/grid_vs_1d.sh KINTSUGI OUT_DIR [STEPS] [--update-docs]
# Prints a markdown table and writes it to OUT_DIR/table; with --update-docs also between
# the grid_vs_1d markers of docs/benchmarks.md. Needs data/ (scripts/fetch_data.sh) and mpirun;
# about a minute on 2 cores.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kintsugi="$1" out="$2" steps="${3:-8}" update="${4:-}"
data="$root/data"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
run=(--config "$root/configs/gpt-tiny.toml" --set data.train="$data/brown/train.bin"
  --set data.val="$data/brown/val.bin" --set data.tokenizer="$data/gpt2-tokenizer"
  --set train.global_batch=8 --set train.micro_batch=2 --set train.steps="$steps"
  --set train.warmup_steps=1 --set train.eval_every=0 --set train.eval_batches=1
  --set train.log_every=1 --set train.save_checkpoint=false --set train.threads=1)
# Pins that leave exactly the measured layout: no pipeline, ZeRO, recomputation or sp.
pins=(--pp 1 --micro-batch 2 --zero 0 --recompute none --sequence-parallel=false --schedule 1f1b)
table="$out/table"
{
  echo "| layout (4 ranks) | measured ms/step | predicted ms/step | error |"
  echo "|---|---:|---:|---:|"
} > "$table"
failures=0
layout() {  # NAME TRAIN_FLAGS -- PLAN_FLAGS
  local name="$1"
  shift
  local train=() plan=()
  while [[ "$1" != "--" ]]; do train+=("$1"); shift; done
  shift
  plan=("$@")
  if ! mpirun -q -np 4 --oversubscribe --bind-to none "$kintsugi" train "${run[@]}" "${train[@]}" \
      --out "$out/$name" --overwrite > "$out/$name.log" 2>&1; then
    echo "$name: training failed ($out/$name.log)"
    failures=$((failures + 1))
    return
  fi
  local predicted
  if ! predicted="$("$kintsugi" plan "${run[@]}" --cluster local --ranks 4 --top 1 --json \
      "${pins[@]}" "${plan[@]}" 2> "$out/$name.plan.log" |
      python3 -c 'import json, sys; print(1e3 * json.load(sys.stdin)["layouts"][0]["step_seconds"]["total"])')"; then
    echo "$name: plan failed ($out/$name.plan.log)"
    failures=$((failures + 1))
    return
  fi
  python3 - "$out/$name/metrics.jsonl" "$predicted" "$name" >> "$table" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
times = [r["step_ms"] for r in rows if "step_ms" in r and r.get("step", 0) >= 2]
measured, predicted = statistics.median(times), float(sys.argv[2])
print(f"| {sys.argv[3]} | {measured:.0f} | {predicted:.0f} | {100 * (predicted - measured) / measured:+.0f}% |")
EOF
  tail -1 "$table"
}
layout "tp 4" --tp 4 -- --tp 4 --dp 1 --tensor-grid none
layout "tp 2 x dp 2" --tp 2 --dp 2 -- --tp 2 --dp 2 --tensor-grid none
layout "dp 4" --dp 4 -- --tp 1 --dp 4 --tensor-grid none
for grid in 2,2,1 1,2,2 2,1,2 1,4,1 4,1,1; do
  layout "grid ${grid//,/x}" --tensor-grid "$grid" -- --dp 1 --tensor-grid "$grid"
done
layout "grid 2x1x1 x dp 2" --tensor-grid 2,1,1 --dp 2 -- --dp 2 --tensor-grid 2,1,1
if [[ "$update" == --update-docs ]]; then
  python3 - "$root/docs/benchmarks.md" "$table" <<'EOF'
import sys
doc, table = open(sys.argv[1]).read(), open(sys.argv[2]).read()
begin, end = "<!-- grid_vs_1d:begin -->\n", "<!-- grid_vs_1d:end -->"
a, b = doc.index(begin) + len(begin), doc.index(end)
open(sys.argv[1], "w").write(doc[:a] + table + doc[b:])
EOF
  echo "updated docs/benchmarks.md"
fi
((failures == 0)) || { echo "$failures layout(s) failed"; exit 1; }
