#!/usr/bin/env bash
# A token file truncated while a run reads it (through its memory mapping): the run names the
# file that changed and exits 1, instead of dying of a bus error with no message; the
# checkpoint saved before stays complete.
# Usage: token_file_truncated.sh KINTSUGI OUT_DIR [flags...]
set -uo pipefail
kintsugi="$1" out="$2"
shift 2
export OMP_NUM_THREADS=1
dir="$out/token_file_truncated"
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }
# The flags' training file, copied so that it can be truncated.
train=""
prev=""
for a in "$@"; do
  [[ "$prev" == --set && "$a" == data.train=* ]] && train="${a#data.train=}"
  prev="$a"
done
[[ -f "$train" ]] || die "no data.train in the flags"
cp "$train" "$dir/train.bin"

KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:200 "$kintsugi" train "$@" --set data.train="$dir/train.bin" \
  --set train.steps=100 --save-every 1 --out "$dir/run" >"$dir/log" 2>"$dir/err" &
pid=$!
for _ in $(seq 600); do
  [[ -f "$dir/run/checkpoints/step-00000001/manifest.json" ]] && break
  sleep 0.1
done
[[ -f "$dir/run/checkpoints/step-00000001/manifest.json" ]] || die "no step was saved: $(cat "$dir/err")"
truncate -s 4096 "$dir/train.bin"
wait "$pid"
status=$?
cat "$dir/err"
((status == 1)) || die "exit status $status, expected 1"
grep -q "token file $dir/train.bin changed while this run was reading it" "$dir/err" ||
  die "the message does not name the file"
test -f "$dir/run/checkpoints/step-00000001/manifest.json" || die "the checkpoint of step 1 is gone"
echo "the run named the truncated file and exited 1"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
