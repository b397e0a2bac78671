#!/usr/bin/env bash
# `kintsugi eval --init-from` a Hugging Face export of a run's model, with the run's config for
# the model's shape, gives the run's last validation loss (3 windows).
# Usage: eval_init_from.sh KINTSUGI RUN_DIR HF_FILE VAL_FILE [config flags...]
set -euo pipefail
kintsugi="$1" run="$2" hf="$3" val="$4"
shift 4
export OMP_NUM_THREADS=1
want="$(tail -n 1 "$run/metrics.jsonl")"
got="$("$kintsugi" eval --init-from "$hf" "$@" --data "$val" --windows 3 --json)"
python3 - "$want" "$got" <<'PY'
import json, math, sys
want, got = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"eval --init-from: {got['loss']!r}, train's val_loss {want['val_loss']!r}")
sys.exit(0 if math.isclose(got["loss"], want["val_loss"], rel_tol=1e-12) else 1)
PY
