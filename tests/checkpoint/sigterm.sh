#!/usr/bin/env bash
# Pre-emption: SIGTERM (or SIGINT) during training saves a checkpoint at the next step boundary
# and exits 0; `--resume auto` then continues bit for bit like a run that never stopped.
# The learning-rate schedule is pinned (train.decay_steps) so that runs of different lengths
# share it.
# Usage: sigterm.sh KINTSUGI CHECK_RUN OUT_DIR SIGNAL [flags...]
set -uo pipefail
kintsugi="$1" check="$2" out="$3" signal="$4"
shift 4
export OMP_NUM_THREADS=1
dir="$out/sig$signal"
rm -rf "$dir"
die() { echo "FAIL: $*"; exit 1; }
flags=("$@" --set train.decay_steps=20 --set train.save_checkpoint=true)

"$kintsugi" train "${flags[@]}" --set train.steps=100000 --out "$dir/run" >"$dir.log" 2>&1 &
pid=$!
for _ in $(seq 600); do  # until it has trained two steps
  [[ -f "$dir/run/metrics.jsonl" ]] && (($(wc -l <"$dir/run/metrics.jsonl") >= 2)) && break
  sleep 0.1
done
kill -"$signal" "$pid"
wait "$pid"
status=$?
cat "$dir.log"
((status == 0)) || die "the signalled run exited with status $status"
grep -q "stopped by a signal after step" "$dir.log" || die "no stop message"
steps=$(sed -n 's/.*stopped by a signal after step \([0-9]*\).*/\1/p' "$dir.log")
test -f "$dir/run/checkpoints/step-$(printf %08d "$steps")/manifest.json" || die "no checkpoint of step $steps"

total=$((steps + 2))
"$kintsugi" train "${flags[@]}" --set train.steps=$total --resume auto --out "$dir/run" || die "resume failed"
"$kintsugi" train "${flags[@]}" --set train.steps=$total --out "$dir/full" >/dev/null || die "reference failed"
"$check" resumed "$dir/full" "$dir/run" 0
