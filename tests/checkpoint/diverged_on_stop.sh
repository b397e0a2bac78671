#!/usr/bin/env bash
# The save on a stop signal makes the same checks as a scheduled one, and never prunes the last
# sound checkpoint. A run with a sound checkpoint of step 2 resumes with train.lr = 1e30 (the
# weights jump to ~1e30, still finite, at step 3), train.keep_checkpoints = 1 and no scheduled
# saves, and is sent SIGTERM in step 4: it must not save step 3, must exit non-zero with one line
# naming step 2, and step 2 must stay whole and `latest` (docs/checkpoints.md).
# Usage: diverged_on_stop.sh KINTSUGI OUT_DIR [flags...]
set -uo pipefail
kintsugi="$1" out="$2"
shift 2
export OMP_NUM_THREADS=1
dir="$out/diverged_on_stop"
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }
ckpts="$dir/run/checkpoints"

"$kintsugi" train "$@" --set train.steps=2 --save-every 2 --out "$dir/run" >"$dir/first.log" 2>&1 ||
  die "the first run failed: $(cat "$dir/first.log")"
[[ "$(cat "$ckpts/latest")" == step-00000002 ]] || die "no checkpoint of step 2"

# 8 micro-batches of 0.5 s: step 4 lasts 4 s, and the signal comes early in it.
KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:500 "$kintsugi" train "$@" --set train.lr=1e30 \
  --set train.steps=100 --set train.save_every=0 --set train.keep_checkpoints=1 \
  --resume auto --out "$dir/run" >"$dir/stopped.log" 2>"$dir/stopped.err" &
pid=$!
for _ in $(seq 600); do  # until step 3 is done
  (($(grep -c '"loss":' "$dir/run/metrics.jsonl" || true) >= 3)) && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
status=$?
cat "$dir/stopped.log" "$dir/stopped.err"
((status != 0 && status < 128)) || die "the stopped run exited with status $status"
(($(grep -c '' "$dir/stopped.err") == 1)) || die "expected one line on stderr"
grep -Eq "the run diverged: after step 3 the validation loss is .*step 3 was not saved; resume from $ckpts/step-00000002" \
  "$dir/stopped.err" || die "the message does not name the diverged step and step 2"
[[ ! -e "$ckpts/step-00000003" ]] || die "the diverged state of step 3 was saved"
[[ -f "$ckpts/step-00000002/manifest.json" ]] || die "the sound checkpoint of step 2 was removed"
[[ "$(cat "$ckpts/latest")" == step-00000002 ]] || die "latest names $(cat "$ckpts/latest")"
echo "the stop save refused the diverged state; step 2 stays latest"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
