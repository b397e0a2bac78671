#!/usr/bin/env bash
# A rank stopped (SIGSTOP) while the job starts, before or inside MPI initialisation, must not
# hang the job: the others wait in MPI_Init or the node split, where no communicator deadline
# exists yet. The startup deadline (KINTSUGI_STARTUP_TIMEOUT_S, 5 s here) ends the job with one
# message naming the wait, and no process of the job is left (comm/mpi/startup_deadline.hpp).
# The rank stops itself (KINTSUGI_TEST_STOP_AT_START) so that the moment is exact.
# Usage: expect_stopped_at_start_ends_job.sh KINTSUGI OUT_DIR WHERE [train flags...]
# (WHERE: init or split, as in KINTSUGI_TEST_STOP_AT_START).
set -uo pipefail
kintsugi="$1" out="$2" where="$3"
shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/stopped_at_$where"
rm -rf "$dir" && mkdir -p "$dir"
log="$dir/log"
KINTSUGI_STARTUP_TIMEOUT_S=5 KINTSUGI_TEST_STOP_AT_START="1:$where" \
  mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train --out "$dir/run" "$@" \
  >"$log" 2>&1 &
launcher=$!
ranks=""
cleanup() {
  for pid in $ranks; do kill -KILL "$pid" 2>/dev/null; done
  kill -KILL "$launcher" 2>/dev/null
}
trap cleanup EXIT
fail() {
  cat "$log"
  echo "FAIL: $*"
  exit 1
}
limit=120  # generous for a loaded machine: the deadline is 5 s
start=$SECONDS
while kill -0 "$launcher" 2>/dev/null && ((SECONDS - start < limit)); do
  ranks="$ranks $(pgrep -P "$launcher" | tr '\n' ' ')"
  sleep 0.2
done
kill -0 "$launcher" 2>/dev/null && fail "the job still runs ${limit}s after it started: it hangs"
wait "$launcher"
status=$?
cat "$log"
((status != 0)) || { echo "FAIL: the job reported success"; exit 1; }
grep -qE "kintsugi: error: world rank 0 waited 5 s \(KINTSUGI_STARTUP_TIMEOUT_S\) in .* for the other ranks of the job" "$log" ||
  { echo "FAIL: no message naming the startup wait"; exit 1; }
for pid in $ranks; do
  if kill -0 "$pid" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; then
    echo "FAIL: rank process $pid outlived mpirun"
    exit 1
  fi
done
echo "ok: the job ended with status $status $((SECONDS - start))s after it started"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
