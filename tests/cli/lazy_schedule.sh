#!/usr/bin/env bash
# A run of a trillion steps with a batch ramp-up starts training at once: nothing is expanded per
# step (train/batch_rampup.hpp). Trains until its first step line, then stops it.
# Usage: lazy_schedule.sh KINTSUGI OUT_DIR [flags...]
set -u
kintsugi="$1" out="$2"
shift 2
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$kintsugi" train --out "$out" --overwrite "$@" --set train.steps=1000000000000 \
  --set train.log_every=1 >"$log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -Eq "^step +1/1000000000000 " "$log" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
grep -v "^step" "$log"
grep -q "^batch ramp-up: " "$log" && grep -Eq "^step +1/1000000000000 " "$log"
