#!/usr/bin/env bash
# Pre-emption through the launcher: SIGTERM to mpirun in the middle of a step (PHASE train) or
# of an evaluation (PHASE eval) of 24 s. Open MPI 4 passes the TERM on to the ranks
# odls_base_sigkill_timeout seconds later and kills them as long again after that (8 here, 1 by
# default; docs/checkpoints.md); the ranks must notice at the next micro-batch, save the last
# completed step and exit within that time. The checkpoint must be of the last step in
# metrics.jsonl and resume bit for bit like a run that never stopped. Micro-batches are slowed
# to 1 s (KINTSUGI_TEST_SLOW_MICRO_BATCHES; training's from step 2 on: step 1, which the test
# waits for, runs at full speed). Timeline from the end of step 1: TERM to mpirun at 1 s, to
# the ranks at 9 s, KILL at 17 s, end of the slow step or evaluation at 24 s. The ranks notice
# within a micro-batch, a pipeline drains up to two more: about 5 s are left for the save,
# and a run that looks at the signal only between steps is killed before it gets there.
# (With a 3-s delay and 8-s steps the save had about 1 s and once missed it on a loaded machine.)
# With a pipeline the stages drain the interrupted program (docs/checkpoints.md).
# Usage: stop_mid_step.sh KINTSUGI CHECK_RUN OUT_DIR PHASE RANKS [flags...]
# SEQUENCES (environment): sequences per step or evaluation, 24 x RANKS unless set (24 per
# data-parallel rank gives each rank 24 micro-batches of 1 sequence).
set -uo pipefail
kintsugi="$1" check="$2" out="$3" phase="$4" ranks="$5"
shift 5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/stop_mid_${phase}_np${ranks}_$(echo "$*" | md5sum | cut -c1-8)"
sequences="${SEQUENCES:-$((24 * ranks))}"
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }
launch() { mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "$@"; }
flags=("$@" --set train.decay_steps=20)
# 24 micro-batches per rank per step (train) or per evaluation (eval): 24 s at 1 s each.
delay="$phase:1000"
if [[ "$phase" == train ]]; then
  delay+=":2"
  slow=("${flags[@]}" --set train.global_batch=$sequences --set train.eval_every=0)
else
  slow=("${flags[@]}" --set train.eval_every=2 --set train.eval_batches=$sequences)
fi

# Started directly (not through the launch function) so that $! is mpirun itself.
KINTSUGI_TEST_SLOW_MICRO_BATCHES="$delay" OMPI_MCA_odls_base_sigkill_timeout=8 \
  mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "${slow[@]}" \
  --set train.steps=100000 --out "$dir/run" >"$dir/signalled.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do  # until step 1 is done (or the job ended: the checks below say why)
  grep -qs '"loss":' "$dir/run/metrics.jsonl" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
sleep 1  # one second into step 2 (train), or into the evaluation after a quick step 2 (eval)
kill -TERM "$pid"
wait "$pid"
cat "$dir/signalled.log"
steps=$(grep -c '"loss":' "$dir/run/metrics.jsonl" || true)
ckpt="$dir/run/checkpoints/step-$(printf %08d "$steps")"
test -f "$ckpt/manifest.json" || die "no checkpoint of step $steps, the last completed: $(ls "$dir/run/checkpoints" 2>&1)"

total=$((steps + 2))
launch "${slow[@]}" --set train.steps=$total --resume auto --out "$dir/run" || die "resume failed"
launch "${slow[@]}" --set train.steps=$total --out "$dir/full" >/dev/null || die "reference failed"
if [[ "$phase" == train ]]; then
  "$check" resumed "$dir/full" "$dir/run" 0 || exit 1
else  # the interrupted evaluation left its step's line without a validation loss
  "$check" weights "$dir/full" "$dir/run" 0 || exit 1
fi
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
