#!/usr/bin/env bash
# scripts/preemptible.sh exits with its launcher's status however the stop signals fall: a
# launcher that ends cleanly (0) on the USR1 the wrapper forwards, signalled through the
# wrapper's process group six times within about 0.2 s, as a scheduler or an impatient person
# repeats them, N times over. A trapped signal that cut the wrapper's last wait short made it
# exit 143, and a trap running as the launcher ended lost its status (255): each about once in
# 15 tries of this loop before the wrapper ignored every signal after the first.
# Usage: preemptible_wrapper_status.sh PREEMPTIBLE [N]
set -uo pipefail
wrapper="$1" n="${2:-30}" bad=0
for i in $(seq "$n"); do
  # The launcher: ends with 0 shortly after its USR1 (as kintsugi does after its save).
  # It says it is ready once its trap is set: on a loaded machine a fixed pause was sometimes
  # shorter than its start, and a USR1 before the trap ended it (138), which is not the wrapper's
  # doing.
  ready="$(mktemp -u)"
  setsid "$wrapper" bash -c 'sleep 30 & child=$!; trap "kill $child; sleep 0.05; exit 0" USR1; : >"$0"; wait' "$ready" &
  top=$!
  for _ in $(seq 200); do [[ -e "$ready" ]] && break; sleep 0.05; done
  rm -f "$ready"
  for _ in 1 2 3 4 5 6; do
    kill -TERM -- "-$top" 2>/dev/null
    sleep "0.0$((RANDOM % 6))"
  done
  wait "$top"
  status=$?
  ((status == 0)) || { echo "try $i: the wrapper exited $status, its launcher 0"; bad=$((bad + 1)); }
done
((bad == 0)) || { echo "FAIL: $bad of $n tries lost the launcher's status"; exit 1; }
echo "ok: $n tries, every one exited with the launcher's 0"
