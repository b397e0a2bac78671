#!/usr/bin/env bash
# comm_cpu.sh -- kintsugi's collectives between CPU ranks beside the MPI library called directly,
# and what they cost a data-parallel training step, before and after the changes described in
# docs/benchmarks.md ("Collectives: the communicator vs the library called directly").
#
#   before: KINTSUGI_KEEP_FREED_MEMORY=0 KINTSUGI_MPI_REDUCE_SCATTER=library (the library's
#           MPI_Ireduce_scatter_block; malloc returning freed memory to the system)
#   after:  the defaults
#
# 1. build/bench/kintsugi_comm_bench on 2 ranks, each setting --runs times, interleaved.
# 2. dp 2 ZeRO-2 GPT-2 small (124M; micro-batch 1 x 128 tokens, global batch 2) for --steps
#    steps, each setting --runs times, interleaved; the median step time of steps 2.. of each run.
#
# Usage: bench/comm_cpu.sh [--runs 2] [--steps 4] [--sizes-mib 4,16,64] [--out DIR]
# Needs: build/kintsugi, build/bench/kintsugi_comm_bench, data/ (scripts/fetch_data.sh), mpirun.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"
BENCH="${BENCH:-$ROOT/build/bench/kintsugi_comm_bench}"
RUNS=2 STEPS=4 SIZES=4,16,64
OUT="$(mktemp -d /tmp/kintsugi-comm.XXXXXX)"
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --sizes-mib) SIZES="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--steps N] [--sizes-mib LIST] [--out DIR]" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
setting() {  # before|after: the environment of that setting
  if [[ $1 == before ]]; then
    echo "KINTSUGI_KEEP_FREED_MEMORY=0 KINTSUGI_MPI_REDUCE_SCATTER=library"
  else
    echo "KINTSUGI_KEEP_FREED_MEMORY=1 KINTSUGI_MPI_REDUCE_SCATTER=alltoall"
  fi
}
mpi() {  # before|after command...: under mpirun -np 2 with the setting's environment
  local env
  read -ra env <<<"$(setting "$1")"
  shift
  env "${env[@]}" mpirun -q -np 2 --oversubscribe --bind-to none \
    -x KINTSUGI_KEEP_FREED_MEMORY -x KINTSUGI_MPI_REDUCE_SCATTER "$@"
}
echo "comm_cpu: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
  for s in before after; do
    echo "comm_cpu: collectives, $s, run $run" >&2
    mpi "$s" "$BENCH" --sizes-mib "$SIZES" --json >"$OUT/bench_${s}_$run.jsonl"
  done
done
train=(train --config "$ROOT/configs/gpt-tiny.toml" --set model.preset=gpt2 --set "data.train=$ROOT/data/brown/train.bin"
       --set "data.val=$ROOT/data/brown/val.bin" --set "data.tokenizer=$ROOT/data/gpt2-tokenizer"
       --set model.seq_len=128 --set train.global_batch=2 --set train.micro_batch=1
       --set "train.steps=$STEPS" --set train.warmup_steps=1 --set train.eval_every=0
       --set train.save_checkpoint=false --dp 2 --zero 2 --overwrite)
for run in $(seq "$RUNS"); do
  for s in before after; do
    echo "comm_cpu: dp 2 ZeRO-2 GPT-2 small, $s, run $run" >&2
    OMP_NUM_THREADS=1 mpi "$s" "$KINTSUGI" "${train[@]}" --out "$OUT/train_${s}_$run" \
      >"$OUT/train_${s}_$run.log"
  done
done
/usr/bin/python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for s in ("before", "after"):
    for r in range(1, runs + 1):
        for line in open(f"{out}/bench_{s}_{r}.jsonl"):
            j = json.loads(line)
            rows.setdefault((j["op"], j["mib"], j["way"]), {}).setdefault(s, []).append(j["median_us"])
print("| collective | MiB | way | before (us) | after (us) | after / best library way |")
print("|---|---:|---|---:|---:|---:|")
best = {}
for (op, mib, way), v in rows.items():
    if way != "kintsugi":
        b = min(v["after"])
        best[(op, mib)] = min(best.get((op, mib), b), b)
for (op, mib, way), v in rows.items():
    ratio = min(v["after"]) / best[(op, mib)]
    print(f"| {op} | {mib} | {way} | {', '.join(f'{x:,.0f}' for x in v['before'])} | "
          f"{', '.join(f'{x:,.0f}' for x in v['after'])} | {ratio:.2f}x |")
print("\n| dp 2 ZeRO-2 GPT-2 small | ms/step per run (median of steps 2..) |")
print("|---|---|")
for s in ("before", "after"):
    ms = []
    for r in range(1, runs + 1):
        steps = [json.loads(l) for l in open(f"{out}/train_{s}_{r}/metrics.jsonl")]
        steps = [x for x in steps if "step_ms" in x]
        ms.append(statistics.median(x["step_ms"] for x in (steps[1:] or steps)))
    print(f"| {s} | {', '.join(f'{m:,.0f}' for m in ms)} |")
PY
echo "comm_cpu: logs in $OUT" >&2
