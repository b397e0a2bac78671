#!/usr/bin/env bash
# pipeline_cpu.sh -- the pipeline bubble and activation memory of each schedule, measured.
#
# Trains GPT-2 124M (context 128) on 2 pipeline stages of 1 thread each (this machine's 2 cores,
# no oversubscription), 8 micro-batches of 1 sequence per step, with GPipe, 1F1B and interleaved
# 1F1B (2 chunks per rank). From the Chrome trace of the last step it computes, per stage, the
# fraction of the forward/backward phase it spent not computing, next to the theory
# (p - 1) / (v m + p - 1), and the most micro-batches whose activations the stage held at once,
# next to the schedule's bound (GPipe m, 1F1B p - stage).
#
# Usage: bench/pipeline_cpu.sh [--steps 3] [--out DIR]
# Needs: build/kintsugi, data/ (scripts/fetch_data.sh), mpirun, /usr/bin/python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"
STEPS=3
OUT="$(mktemp -d /tmp/kintsugi-pipeline.XXXXXX)"
while (($#)); do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--out DIR]" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(--config "$ROOT/configs/gpt-tiny.toml" --set 'model.preset="gpt2"' --set model.seq_len=128
        --set "data.train=$ROOT/data/brown/train.bin" --set "data.val=$ROOT/data/brown/val.bin"
        --set train.global_batch=8 --set train.micro_batch=1 --set "train.steps=$STEPS"
        --set train.warmup_steps=1 --set train.eval_every=0 --set train.eval_batches=2
        --set train.save_checkpoint=false --pp 2 --overwrite)
for schedule in gpipe 1f1b interleaved; do
  extra=()
  [[ $schedule == interleaved ]] && extra=(--virtual-stages 2)
  echo "pipeline_cpu: $schedule" >&2
  mpirun -q -np 2 --oversubscribe --bind-to none "$KINTSUGI" train "${common[@]}" \
    --schedule "$schedule" "${extra[@]}" --out "$OUT/$schedule" --trace "$OUT/$schedule/trace.json" \
    >"$OUT/$schedule.log"
done

/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
p, m = 2, 8
print("GPT-2 124M, context 128, 2 pipeline stages x 1 thread, 8 micro-batches of 1 sequence "
      "per step; the last step of each run (Chrome trace).\n")
print("| schedule | stage | blocks | step ms | not computing (measured) | bubble (theory) "
      "| micro-batches held at most (measured) | bound | stage 0 activation memory |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for schedule in ["gpipe", "1f1b", "interleaved"]:
    v = 2 if schedule == "interleaved" else 1
    desc = json.load(open(f"{out}/{schedule}/run.json"))
    chunks = desc["parallel"]["layers_per_chunk"]
    last = json.loads(open(f"{out}/{schedule}/metrics.jsonl").readlines()[-1])
    step_ms = last["step_ms"]
    act_mib = last["memory_peak_bytes"]["activations"] / 2**20
    events = json.load(open(f"{out}/{schedule}/trace.json"))["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X" and e["cat"] == "compute"
             and e["name"][:2] in ("F ", "B ")]
    begin = min(e["ts"] for e in spans)
    end = max(e["ts"] + e["dur"] for e in spans)
    theory = (p - 1) / (v * m + p - 1)
    for stage in range(p):
        busy = sum(e["dur"] for e in spans if e["pid"] == stage)
        held = max([e["args"]["value"] for e in events
                    if e.get("ph") == "C" and e["pid"] == stage] or [0])
        blocks = sum(chunks[c * p + stage] for c in range(v))
        bound = m if schedule == "gpipe" else (p - stage if v == 1 else "-")
        print(f"| {schedule} | {stage} | {blocks}{' + head' if stage == p - 1 else ''} | "
              f"{step_ms:.0f} | {100 * (1 - busy / (end - begin)):.1f}% | {100 * theory:.1f}% | "
              f"{held:.0f} | {bound} | {f'{act_mib:.0f} MiB' if stage == 0 else ''} |")
print("\n'Not computing' is the share of the forward/backward phase (first forward to last "
      "backward, all stages) in which the stage ran neither; the theory assumes equal stages.")
PY
echo "pipeline_cpu: logs, metrics and traces in $OUT" >&2
