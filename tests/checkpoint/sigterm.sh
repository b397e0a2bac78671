#!/usr/bin/env bash
# Pre-emption: SIGTERM (or SIGINT) during training saves a checkpoint at the next step boundary
# and exits 0; `--resume auto` then continues bit for bit like a run that never stopped. Under
# mpirun only the last rank is signalled: the ranks agree to stop together.
# The learning-rate schedule is pinned (train.decay_steps) so that runs of different lengths
# share it.
# Usage: sigterm.sh KINTSUGI CHECK_RUN OUT_DIR SIGNAL RANKS [flags...]
set -uo pipefail
kintsugi="$1" check="$2" out="$3" signal="$4" ranks="$5"
shift 5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/sig${signal}_np${ranks}_$(echo "$*" | md5sum | cut -c1-8)"
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }
launch() {
  if ((ranks == 1)); then "$kintsugi" train "$@"; else
    mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "$@"; fi
}
flags=("$@" --set train.decay_steps=20)

# Started directly (not through the launch function) so that $! is the process itself.
if ((ranks == 1)); then
  "$kintsugi" train "${flags[@]}" --set train.steps=100000 --out "$dir/run" >"$dir/signalled.log" 2>&1 &
else
  mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "${flags[@]}" \
    --set train.steps=100000 --out "$dir/run" >"$dir/signalled.log" 2>&1 &
fi
pid=$!
for _ in $(seq 600); do  # until it has trained two steps
  [[ -f "$dir/run/metrics.jsonl" ]] && (($(grep -c '"loss":' "$dir/run/metrics.jsonl" || true) >= 2)) && break
  sleep 0.1
done
if ((ranks == 1)); then target=$pid; else target=$(pgrep -P "$pid" | tail -1); fi
[[ -n "$target" ]] || die "no rank process found"
kill -"$signal" "$target"
wait "$pid"
status=$?
cat "$dir/signalled.log"
((status == 0)) || die "the signalled run exited with status $status"
grep -q "stopped by a signal after step" "$dir/signalled.log" || die "no stop message"
steps=$(sed -n 's/.*stopped by a signal after step \([0-9]*\).*/\1/p' "$dir/signalled.log")
test -f "$dir/run/checkpoints/step-$(printf %08d "$steps")/manifest.json" || die "no checkpoint of step $steps"
# The summary says the run stopped, and that its one validation loss is the one before step 1.
grep -q "^stopped by a signal at step $steps: .* | val loss [0-9.]* at step 0 (not evaluated since) |" \
  "$dir/signalled.log" || die "the summary line does not say the run stopped, or repeats an unchanged val loss"

total=$((steps + 2))
launch "${flags[@]}" --set train.steps=$total --resume auto --out "$dir/run" || die "resume failed"
launch "${flags[@]}" --set train.steps=$total --out "$dir/full" >/dev/null || die "reference failed"
"$check" resumed "$dir/full" "$dir/run" 0 || exit 1
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
