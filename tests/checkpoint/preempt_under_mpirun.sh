#!/usr/bin/env bash
# Pre-emption under mpirun as schedulers signal (docs/checkpoints.md, "Pre-emption under
# mpirun"): three signals 0.2 s apart, the way a scheduler or an impatient person repeats them.
#   usr1_mpirun   one SIGUSR1 to mpirun, which passes it on to every rank at once
#   term_wrapper  SIGTERM to scripts/preemptible.sh, which runs mpirun and turns it into USR1
#   term_group    SIGTERM to the wrapper's whole process group (mpirun's is its own)
# Each must end with every rank's pre-emption save: exit 0, a checkpoint of the last completed
# step that `--resume auto` continues. And
#   term_bare     SIGTERM to mpirun itself: Open MPI 4 exits at once on the second one without
#                 passing it on, and nothing is saved; the ranks must still not outlive it.
# In every case no rank process is left 30 s after mpirun ended (generous on a loaded machine;
# the measured time is about 1 s). Micro-batches are slowed to 0.3 s so that the signals come
# in the middle of a step.
# Usage: preempt_under_mpirun.sh KINTSUGI PREEMPTIBLE OUT_DIR CASE [train flags...]
set -uo pipefail
kintsugi="$1" wrapper="$2" out="$3" case="$4"
shift 4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/preempt_$case"
rm -rf "$dir" && mkdir -p "$dir"
log="$dir/signalled.log"
flags=("$@" --set train.decay_steps=20)
run=(mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train "${flags[@]}")
slow=(env KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:300)
ranks="" launcher="" top=""
cleanup() {
  for pid in $ranks $launcher $top; do kill -KILL "$pid" 2>/dev/null; done
}
trap cleanup EXIT
fail() {
  cat "$log"
  echo "FAIL ($case): $*"
  exit 1
}

# The wrapper is started in a session of its own (setsid execs it: $! is the wrapper), so its
# process group can be signalled as a terminal or a container runtime would.
case "$case" in
  usr1_mpirun | term_bare) "${slow[@]}" "${run[@]}" --set train.steps=100000 --out "$dir/run" >"$log" 2>&1 & ;;
  term_wrapper | term_group) setsid "$wrapper" "${slow[@]}" "${run[@]}" --set train.steps=100000 --out "$dir/run" >"$log" 2>&1 & ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
top=$!
for _ in $(seq 1200); do  # until step 1 is done
  grep -qs '"loss":' "$dir/run/metrics.jsonl" && break
  kill -0 "$top" 2>/dev/null || fail "the run ended before it was signalled"
  sleep 0.1
done
grep -qs '"loss":' "$dir/run/metrics.jsonl" || fail "no step finished within 120 s"
launcher=$top
[[ "$case" == term_* && "$case" != term_bare ]] && launcher=$(pgrep -P "$top")
[[ -n "$launcher" ]] || fail "no mpirun under the wrapper"
ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
[[ -n "$ranks" ]] || fail "no rank process under mpirun $launcher"

for round in 1 2 3; do
  case "$case" in
    # One USR1 is the recipe: an mpirun already ending after the ranks' save dies of another.
    usr1_mpirun) ((round == 1)) && kill -USR1 "$top" ;;
    term_bare | term_wrapper) kill -TERM "$top" ;;
    term_group) kill -TERM -- "-$top" ;;  # the session leader's group id is its pid
  esac
  sleep 0.2
done
limit=120  # a scheduler's grace period, generous for a loaded machine
start=$SECONDS
while kill -0 "$top" 2>/dev/null && ((SECONDS - start < limit)); do sleep 0.2; done
kill -0 "$top" 2>/dev/null && fail "still running ${limit}s after the signals"
wait "$top"
status=$?
start=$SECONDS
for pid in $ranks; do
  while kill -0 "$pid" 2>/dev/null && ((SECONDS - start < 30)); do sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && fail "rank process $pid outlived mpirun by 30 s"
done
cat "$log"
if [[ "$case" == term_bare ]]; then
  ((status != 0)) || fail "mpirun reported success after three TERMs"
  echo "ok ($case): mpirun exited with status $status and no rank outlived it"
  exit 0
fi
((status == 0)) || fail "the signalled run exited with status $status"
steps=$(sed -n 's/.*stopped by a signal after step \([0-9]*\).*/\1/p' "$log")
[[ -n "$steps" ]] || fail "no stop message"
(($(grep -c '"loss":' "$dir/run/metrics.jsonl" || true) == steps)) || fail "metrics.jsonl has another step than $steps"
test -f "$dir/run/checkpoints/step-$(printf %08d "$steps")/manifest.json" ||
  fail "no checkpoint of step $steps"
mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train "${flags[@]}" \
  --set train.steps=$((steps + 1)) --resume auto --out "$dir/run" >"$dir/resumed.log" 2>&1 ||
  { cat "$dir/resumed.log"; fail "resume failed"; }
grep -q "resum" "$dir/resumed.log" || { cat "$dir/resumed.log"; fail "the run did not resume"; }
(($(grep -c '"loss":' "$dir/run/metrics.jsonl" || true) == steps + 1)) || fail "the resumed run did not add step $((steps + 1))"
echo "ok ($case): saved step $steps, exit 0, resumed to step $((steps + 1)), no rank outlived mpirun"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
