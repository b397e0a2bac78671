#!/usr/bin/env bash
# `kintsugi eval --init-from` takes what `train --init-from` takes (train/init_weights.hpp), and
# each gives the run's last validation loss (3 windows), exactly: a Hugging Face export of the
# run's model as one file (with the run's config for the model's shape), the folder it lies in
# (config.json and the tokenizer next to it; no config), the run's model/ and the training
# checkpoint of its last step (their own model; no config). With the folder, eval's note says how
# to change its windows (--set model.seq_len), and a file shorter than one window is refused
# naming model.seq_len.
# Usage: eval_init_from.sh KINTSUGI RUN_DIR HF_FILE VAL_FILE [config flags...]
set -euo pipefail
kintsugi="$1" run="$2" hf="$3" val="$4"
shift 4
export OMP_NUM_THREADS=1
want="$(tail -n 1 "$run/metrics.jsonl")"
step="$(ls -d "$run"/checkpoints/step-* | tail -n 1)"
check() {
  local got
  got="$("$kintsugi" eval --init-from "$@" --data "$val" --windows 3 --json)"
  python3 - "$want" "$got" "$1" <<'PY'
import json, math, sys
want, got = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"eval --init-from {sys.argv[3]}: {got['loss']!r}, train's val_loss {want['val_loss']!r}")
sys.exit(0 if math.isclose(got["loss"], want["val_loss"], rel_tol=1e-12) else 1)
PY
}
check "$hf" "$@"
check "$(dirname "$hf")"
check "$run/model"
check "$step"

# The folder's context, and how to change it, as eval (not train) can: --set model.seq_len.
folder="$(dirname "$hf")"
note="$("$kintsugi" eval --init-from "$folder" --data "$val" --windows 1 | grep '^model.seq_len')"
echo "$note"
grep -q "^model.seq_len = 32 from .*config.json (n_positions): windows of 32 tokens; --set model.seq_len=N for windows of N (at most 32" <<<"$note" \
  || { echo "FAIL: the note does not say how eval changes its windows"; exit 1; }
# A file shorter than one window: a longer file or a shorter model.seq_len.
small="$(dirname "$run")/eval_init_from_short"
rm -rf "$small" && mkdir -p "$small"
printf 'A short text.\n' >"$small/short.txt"
"$kintsugi" data tokenize --tokenizer "$folder" --out "$small/short.bin" "$small/short.txt" >/dev/null
"$(dirname "$0")/expect_error.sh" \
  "short.bin holds [0-9]+ tokens, too few for sequences of 32 tokens \(at least 33 are needed\): use more data or a shorter model.seq_len" \
  "$kintsugi" eval --init-from "$folder" --data "$small/short.bin"
# Fewer windows than one micro-batch: the micro-batch that fits.
for i in $(seq 12); do printf 'Sentence number %d of a file of a few windows.\n' "$i"; done >"$small/few.txt"
"$kintsugi" data tokenize --tokenizer "$folder" --out "$small/few.bin" "$small/few.txt" >/dev/null
"$(dirname "$0")/expect_error.sh" \
  "few.bin holds [0-9] windows? of 32 tokens, fewer than --micro-batch 64: give --micro-batch [0-9]" \
  "$kintsugi" eval --init-from "$folder" --data "$small/few.bin" --micro-batch 64
