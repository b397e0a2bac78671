#!/usr/bin/env bash
# A rank that dies mid-run must take the job down, with a message, within a bounded time.
# Usage: expect_killed_rank_ends_job.sh KINTSUGI OUT_DIR [train flags...]
set -uo pipefail
kintsugi="$1" out="$2"
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export KINTSUGI_TEST_KILL_RANK=1:2
rm -rf "$out/killed"
log="$(mktemp)"
start=$SECONDS
timeout 120 mpirun -np 2 --oversubscribe --bind-to none "$kintsugi" train --out "$out/killed" \
  --dp 2 "$@" >"$log" 2>&1
status=$?
elapsed=$((SECONDS - start))
cat "$log"
if ((status == 124)); then
  echo "FAIL: the job hung after rank 1 died (killed by timeout after ${elapsed}s)"
  exit 1
fi
if ((status == 0)); then
  echo "FAIL: the job reported success although rank 1 died"
  exit 1
fi
if ! grep -qiE "signal 9|killed" "$log"; then
  echo "FAIL: no message says that a rank was killed"
  exit 1
fi
echo "ok: the job ended with status $status after ${elapsed}s"
