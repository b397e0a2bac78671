#!/usr/bin/env bash
# `kintsugi eval --init-from` takes what `train --init-from` takes (train/init_weights.hpp), and
# each gives the run's last validation loss (3 windows), exactly: a Hugging Face export of the
# run's model as one file (with the run's config for the model's shape), the folder it lies in
# (config.json and the tokenizer next to it; no config), the run's model/ and the training
# checkpoint of its last step (their own model; no config).
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
