#!/usr/bin/env bash
# A certain deadlock (ranks that issue collectives in different orders) must end the job within
# seconds, with one message saying what every rank waits for and who has not reached it, not
# after comm.timeout_s (600 s here): deadlock_test.cpp's "mismatched" case on 4 ranks.
# Usage: expect_deadlock_ends_job.sh DEADLOCK_TEST
set -uo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
fail() {
  cat "$log"
  echo "FAIL: $*"
  exit 1
}
start=$SECONDS
timeout 120 mpirun -np 4 --oversubscribe --bind-to none "$1" mismatched >"$log" 2>&1
status=$?
elapsed=$((SECONDS - start))
((status != 124)) || fail "the job still ran after 120 s: the deadlock was not found"
((status != 0)) || fail "the job reported success"
grep -qE "deadlock: every rank waits" "$log" || fail "no deadlock message"
grep -qE "world ranks 0, 2, 3 wait for control-plane host_all_reduce #[0-9]+ \(8 bytes\) in group world \(world ranks 0-3\), which world rank 1 has not reached" "$log" ||
  fail "the message does not say that ranks 0, 2, 3 wait in the world's all-reduce for rank 1"
grep -qE "world rank 1 waits for all_reduce #1 \(64 bytes\) in group pair \(world ranks 0, 1\), which world rank 0 has not reached" "$log" ||
  fail "the message does not say that rank 1 waits in its pair's all-reduce for rank 0"
(($(grep -c "kintsugi: error" "$log") == 1)) || fail "not exactly one error message"
((elapsed <= 30)) || fail "the job took ${elapsed}s to end"
cat "$log"
echo "ok: the deadlocked job ended with status $status after ${elapsed}s"
