#!/usr/bin/env bash
# `kintsugi eval` of a saved model with context parallelism prints the loss one process prints
# for the same windows (with either exchange), and generation reads a model trained so (cp holds
# no weights of its own).
# Usage: cp_eval.sh KINTSUGI MODEL_DIR DATA
set -euo pipefail
kintsugi="$1" model="$2" data="$3"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(eval --checkpoint "$model" --data "$data" --windows 8 --json)
serial="$("$kintsugi" "${common[@]}")"
cp="$(mpirun -q -np 4 --oversubscribe --bind-to none "$kintsugi" "${common[@]}" --cp 2 --dp 2)"
# The ring exchange too (docs/parallelism.md, "Ring exchange").
ring="$(mpirun -q -np 4 --oversubscribe --bind-to none "$kintsugi" "${common[@]}" --cp 2 --dp 2 \
  --cp-comm ring)"
python3 - "$serial" "$cp" "$ring" <<'PY'
import json, sys
a = json.loads(sys.argv[1])
for text, comm in ((sys.argv[2], "all_to_all"), (sys.argv[3], "ring")):
    b = json.loads(text)
    if b["layout"].get("cp") != 2 or b["layout"].get("cp_comm") != comm:
        sys.exit(f"FAIL: the JSON layout's cp is {b['layout'].get('cp')} ({b['layout'].get('cp_comm')}), not 2 ({comm})")
    print("serial", a["loss"], "cp 2 x dp 2", comm, b["loss"])
    if abs(a["loss"] - b["loss"]) > 1e-6 * abs(a["loss"]):
        sys.exit(1)
PY
