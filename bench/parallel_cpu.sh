#!/usr/bin/env bash
# parallel_cpu.sh -- step time, throughput and communication of the small GPT (configs/gpt-tiny.toml)
# at several layouts on this machine: serial, dp 2, tp 2, tp 2 + sequence parallelism (and any
# others given). Prints a markdown table with the bytes each rank sent per step, measured by
# the communicator's counters, next to the ring-algorithm theory (plan/comm_volume.hpp).
#
# Usage: bench/parallel_cpu.sh [--steps 10] [--out DIR]
# Needs: build/kintsugi, data/ (scripts/fetch_data.sh), mpirun, /usr/bin/python3 (to summarize).
# Ranks share the machine's cores: each rank gets cores / ranks threads.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"
STEPS=10
OUT="$(mktemp -d /tmp/kintsugi-parallel.XXXXXX)"
while (($#)); do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--out DIR]" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--config "$ROOT/configs/gpt-tiny.toml" --set "data.train=$ROOT/data/brown/train.bin"
        --set "data.val=$ROOT/data/brown/val.bin" --set "train.steps=$STEPS"
        --set train.warmup_steps=2 --set train.eval_every=0 --set train.eval_batches=2
        --set train.save_checkpoint=false --overwrite)
cores=$(nproc)
run() {  # name ranks flags...
  local name="$1" ranks="$2"
  shift 2
  echo "parallel_cpu: $name ($ranks rank(s))" >&2
  if ((ranks == 1)); then
    OMP_NUM_THREADS=$cores "$KINTSUGI" train "${common[@]}" --out "$OUT/$name" "$@" >"$OUT/$name.log"
  else
    OMP_NUM_THREADS=$((cores / ranks > 0 ? cores / ranks : 1)) \
      mpirun -q -np "$ranks" --oversubscribe --bind-to none "$KINTSUGI" train "${common[@]}" \
      --out "$OUT/$name" "$@" >"$OUT/$name.log"
  fi
}
run serial 1
run dp2 2 --dp 2
run tp2 2 --tp 2
run tp2_sp 2 --tp 2 --sequence-parallel

/usr/bin/python3 - "$OUT" "$cores" <<'PY'
import json, statistics, sys
out, cores = sys.argv[1], int(sys.argv[2])
print(f"GPT-tiny (configs/gpt-tiny.toml: 4 layers, d 128, 7.2M parameters), global batch 16 x 128 "
      f"tokens, micro-batch 2; {cores} CPU cores shared by all ranks of a layout.\n")
print("| layout | ranks | ms/step | tokens/s | bytes sent per step and rank (measured) | theory |")
print("|---|---:|---:|---:|---|---|")
for name in ["serial", "dp2", "tp2", "tp2_sp"]:
    steps = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    steps = [x for x in steps if "loss" in x]  # not the step-0 evaluation
    desc = json.load(open(f"{out}/{name}/run.json"))
    timed = steps[2:] or steps
    ms = statistics.median(s["step_ms"] for s in timed)
    tok = 16 * 128 / ms * 1e3
    measured = timed[0].get("comm_bytes_sent", {})
    theory = desc.get("comm_bytes_per_step_theory", {})
    fmt = lambda d: ", ".join(f"{k} {v:,.0f}" for k, v in sorted(d.items())) or "-"
    print(f"| {name} | {desc['world']} | {ms:.0f} | {tok:.0f} | {fmt(measured)} | {fmt(theory)} |")
print("\nTheory: a bandwidth-optimal (ring) all-reduce sends 2(n-1)/n, all-gather and "
      "reduce-scatter (n-1)/n of the buffer per rank; the communicator counts exactly that per "
      "call. Host scalars (the loss, the grad norm) travel on the uncounted control plane.")
PY
echo "parallel_cpu: logs and metrics in $OUT" >&2
