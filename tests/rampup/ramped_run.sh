#!/usr/bin/env bash
# Batch-size ramp-up (train/batch_rampup.hpp) against its serial oracle: a ramped run in LAYOUT
# must take the serial ramped run's batches and end with its losses and weights (relative 1e-5);
# each resumed from its checkpoint of step RESUME_STEP (mid-ramp) must continue bit for bit; and
# every run's metrics.jsonl must carry the ramp's batches, samples_seen and tokens_seen exactly.
# Usage: ramped_run.sh KINTSUGI CHECK_RUN OUT_DIR RANKS "LAYOUT FLAGS" RAMP RESUME_STEP [common flags...]
#   RAMP: "start,increment,samples" (train.batch_rampup)
set -euo pipefail
kintsugi="$1" check="$2" out="$3" ranks="$4" layout="$5" ramp="$6" resume_step="$7"
shift 7
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
read -r -a layout_flags <<<"$layout"
name="np${ranks}${layout// /}"
dir="$out/rampup/$name"
rm -rf "$dir"
mkdir -p "$dir"
ckpt=$(printf "checkpoints/step-%08d" "$resume_step")
common=("$@" --set "train.batch_rampup=[$ramp]" --save-every "$resume_step")

"$kintsugi" train "${common[@]}" --out "$dir/serial" >"$dir/serial.log"
mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "${common[@]}" \
  "${layout_flags[@]}" --out "$dir/parallel" >"$dir/parallel.log"
"$check" compare "$dir/serial" "$dir/parallel" 1e-5

"$kintsugi" train "${common[@]}" --resume "$dir/serial/$ckpt" --out "$dir/serial_resumed" \
  >"$dir/serial_resumed.log"
"$check" resumed "$dir/serial" "$dir/serial_resumed" 0
mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "${common[@]}" \
  "${layout_flags[@]}" --resume "$dir/parallel/$ckpt" --out "$dir/parallel_resumed" \
  >"$dir/parallel_resumed.log"
"$check" resumed "$dir/parallel" "$dir/parallel_resumed" 0
grep -q "batch ramp-up: .* sequences consumed, step $((resume_step + 1)) takes" \
  "$dir/parallel_resumed.log"

python3 - "$dir" "$ramp" <<'PY'
import json, sys
d, ramp = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
start, inc, samples = ramp

def lines(run):
    records = [json.loads(l) for l in open(f"{d}/{run}/metrics.jsonl") if l.strip()]
    return [r for r in records if "loss" in r]  # steps (step 0 records only val_loss)

full = lines("serial")
G = max(r["global_batch"] for r in full)
seq = full[0]["tokens_seen"] // full[0]["samples_seen"]
n = (G - start) // inc
want, consumed = {}, 0
for r in full:
    b = G if consumed >= samples else start + min(consumed * n // samples, n) * inc
    consumed += b
    want[r["step"]] = (b, consumed, consumed * seq)
if len({b for b, _, _ in want.values()}) < 2:
    sys.exit(f"the ramp {ramp} does not change the batch in {len(full)} steps")
for run in ("serial", "parallel", "serial_resumed", "parallel_resumed"):
    for r in lines(run):
        got = (r["global_batch"], r["samples_seen"], r["tokens_seen"])
        if got != want[r["step"]]:
            sys.exit(f"{run} step {r['step']}: (global_batch, samples_seen, tokens_seen) = {got}, "
                     f"want {want[r['step']]}")
print("batches", [want[s][0] for s in sorted(want)])
PY
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
