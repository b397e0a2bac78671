#!/usr/bin/env bash
# A rank that stops mid-run (SIGSTOP: a stuck driver, a swapping node, a debugger) must not hang
# the job: after comm.timeout_s the live ranks find out who is missing, one of them says which
# group, which operation and which ranks did not arrive, and the job ends.
# Usage: expect_stalled_rank_ends_job.sh KINTSUGI OUT_DIR NAME RANKS STALLED_RANK [train flags...]
# (the flags should set a small comm.timeout_s and enough steps to still be running).
set -uo pipefail
kintsugi="$1" out="$2" name="$3" ranks="$4" stalled="$5"
shift 5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
log="$(mktemp)"
rm -rf "${out:?}/$name"
mpirun -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train --out "$out/$name" "$@" \
  >"$log" 2>&1 &
launcher=$!
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null
  kill -KILL "$launcher" 2>/dev/null
}
trap cleanup EXIT
fail() {
  cat "$log"
  echo "FAIL: $*"
  exit 1
}

# Wait for the run to reach step 2, then stop the rank: a child of mpirun whose environment
# names its world rank.
for ((i = 0; i < 600; ++i)); do
  [[ -f "$out/$name/metrics.jsonl" ]] && (($(grep -c '"loss":' "$out/$name/metrics.jsonl" || true) >= 2)) && break
  kill -0 "$launcher" 2>/dev/null || fail "the job ended before a rank could be stopped"
  sleep 0.2
done
for child in $(pgrep -P "$launcher"); do
  tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$stalled" &&
    pid=$child
done
[[ -n "$pid" ]] || fail "no process of world rank $stalled under mpirun $launcher"
kill -STOP "$pid"
stopped=$SECONDS
echo "stopped world rank $stalled (pid $pid)"

limit=90
while kill -0 "$launcher" 2>/dev/null && ((SECONDS - stopped < limit)); do sleep 0.5; done
elapsed=$((SECONDS - stopped))
if kill -0 "$launcher" 2>/dev/null; then
  fail "the job still runs ${limit}s after world rank $stalled stopped: it hangs"
fi
wait "$launcher"
status=$?
cat "$log"
((status != 0)) || { echo "FAIL: the job reported success"; exit 1; }
grep -qE "communication timed out: world rank [0-9]+ waited [0-9.]+ s \(comm.timeout_s\) in group [a-z]+ \(world ranks [0-9, ]+\) for [a-z_ -]+ #[0-9]+" "$log" ||
  { echo "FAIL: no message naming the group and the operation that timed out"; exit 1; }
grep -qE "Ranks that did not answer at all: $stalled\." "$log" ||
  { echo "FAIL: the message does not name world rank $stalled as the one that did not answer"; exit 1; }
(($(grep -c "communication timed out" "$log") == 1)) ||
  { echo "FAIL: more than one rank reported the stall"; exit 1; }
echo "ok: the job ended with status $status ${elapsed}s after world rank $stalled stopped"
