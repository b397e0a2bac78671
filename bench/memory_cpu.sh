#!/usr/bin/env bash
# memory_cpu.sh -- what each memory technique saves, measured: GPT-2 124M trained for a few steps
# on 4 data-parallel ranks with plain dp, ZeRO-1/2/3, hybrid sharding, activation recomputation
# and bf16/fp16 mixed precision. Prints a markdown table of the peak bytes per rank by category
# (the memory tracker's counters) next to the formulas' predictions (run.json,
# plan/memory.hpp), the step time, and the bytes each rank sent per step (measured / ring theory).
#
# Usage: bench/memory_cpu.sh [--steps 3] [--seq 256] [--ranks 4] [--out DIR] [--only a,b,...]
# Needs: build/kintsugi, data/ (scripts/fetch_data.sh), mpirun, /usr/bin/python3 (to summarize).
# The ranks share the machine's cores (cores / ranks threads each, at least 1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"
STEPS=3
SEQ=256
RANKS=4
ONLY=""
OUT="$(mktemp -d /tmp/kintsugi-memory.XXXXXX)"
while (($#)); do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --seq) SEQ="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--seq T] [--ranks N] [--out DIR] [--only a,b]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One micro-batch of one sequence per rank and step: model state dominates, as at scale.
common=(--config "$ROOT/configs/gpt-tiny.toml" --set 'model.preset="gpt2"'
        --set "model.seq_len=$SEQ" --set "data.train=$ROOT/data/brown/train.bin"
        --set "data.val=$ROOT/data/brown/val.bin" --set "train.steps=$STEPS"
        --set "train.global_batch=$RANKS" --set train.micro_batch=1 --set train.warmup_steps=1
        --set train.eval_every=0 --set train.eval_batches=1 --set train.log_every=1
        --set train.save_checkpoint=false --dp "$RANKS" --overwrite)
threads=$(($(nproc) / RANKS > 0 ? $(nproc) / RANKS : 1))
names=()
run() {  # name flags...
  local name="$1"
  shift
  if [[ -n "$ONLY" && ",$ONLY," != *",$name,"* ]]; then return; fi
  names+=("$name")
  echo "memory_cpu: $name" >&2
  OMP_NUM_THREADS=$threads mpirun -q -np "$RANKS" --oversubscribe --bind-to none "$KINTSUGI" \
    train "${common[@]}" --out "$OUT/$name" "$@" >"$OUT/$name.log"
}
run dp
run zero1 --zero 1
run zero2 --zero 2
run zero3 --zero 3
run zero3_hsdp2 --zero 3 --hsdp 2
run recompute_selective --recompute selective
run recompute_full --recompute full
run bf16 --precision bf16
run fp16 --precision fp16
run bf16_zero3 --precision bf16 --zero 3
run bf16_zero3_full --precision bf16 --zero 3 --recompute full

/usr/bin/python3 - "$OUT" "$RANKS" "$SEQ" "$(nproc)" "${names[@]}" <<'PY'
import json, statistics, sys
out, ranks, seq, cores, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
M = 1 << 20
def mib(b): return f"{b / M:,.0f}"
first = json.load(open(f"{out}/{names[0]}/run.json"))
print(f"GPT-2 124M ({first['parameters']:,} parameters), {ranks} data-parallel ranks, one sequence "
      f"of {seq} tokens per rank and step, {cores} CPU cores shared by the ranks. Peak MiB per "
      f"rank, measured / formula; step time is the median after the first step.\n")
print("| option | parameters | gradients | optimizer | model state | activations | workspace | communication | ms/step | sent/step/rank (measured / theory) |")
print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
for name in names:
    steps = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    steps = [x for x in steps if "loss" in x]  # not the step-0 evaluation
    desc = json.load(open(f"{out}/{name}/run.json"))
    theory = desc["memory_bytes_theory"]
    peak = steps[-1]["memory_peak_bytes"]
    ms = statistics.median(s["step_ms"] for s in (steps[1:] or steps))
    cell = lambda k: f"{mib(peak[k])} / {mib(theory[k])}"
    state = sum(peak[k] for k in ("parameters", "gradients", "optimizer_state"))
    state_theory = sum(theory[k] for k in ("parameters", "gradients", "optimizer_state"))
    sent = sum(steps[-1].get("comm_bytes_sent", {}).values())
    sent_theory = sum(desc.get("comm_bytes_per_step_theory", {}).values())
    print(f"| {name} | {cell('parameters')} | {cell('gradients')} | {cell('optimizer_state')} | "
          f"{mib(state)} / {mib(state_theory)} | {cell('activations')} | {mib(peak['workspace'])} | "
          f"{mib(peak['communication'])} | {ms:,.0f} | {mib(sent)} / {mib(sent_theory)} MiB |")
PY
echo "memory_cpu: logs and metrics in $OUT" >&2
