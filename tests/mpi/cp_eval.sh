#!/usr/bin/env bash
# `kintsugi eval` of a saved model with context parallelism prints the loss one process prints
# for the same windows, and generation reads a model trained so (cp holds no weights of its own).
# Usage: cp_eval.sh KINTSUGI MODEL_DIR DATA
set -euo pipefail
kintsugi="$1" model="$2" data="$3"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(eval --checkpoint "$model" --data "$data" --windows 8 --json)
serial="$("$kintsugi" "${common[@]}")"
cp="$(mpirun -q -np 4 --oversubscribe --bind-to none "$kintsugi" "${common[@]}" --cp 2 --dp 2)"
python3 - "$serial" "$cp" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
if b["layout"].get("cp") != 2:
    sys.exit(f"FAIL: the JSON layout's cp is {b['layout'].get('cp')}, not 2")
print("serial", a["loss"], "cp 2 x dp 2", b["loss"])
sys.exit(abs(a["loss"] - b["loss"]) > 1e-6 * abs(a["loss"]))
PY
