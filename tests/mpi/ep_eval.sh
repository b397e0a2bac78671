#!/usr/bin/env bash
# `kintsugi eval` of a saved mixture of experts under expert parallelism prints the loss one
# process prints for the same windows: 7 windows over 2 and 4 data-parallel ranks leave ranks
# with fewer windows, which run the ep group's lockstep forwards and drop their losses
# (docs/moe.md, "Expert parallelism").
# Usage: ep_eval.sh KINTSUGI MODEL_DIR DATA
set -euo pipefail
kintsugi="$1" model="$2" data="$3"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(eval --checkpoint "$model" --data "$data" --windows 7 --json)
serial="$("$kintsugi" "${common[@]}" | tail -1)"
ep2="$(mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" "${common[@]}" --dp 2 --ep 2 | tail -1)"
ep2_dp4="$(mpirun -q -np 4 --oversubscribe --bind-to none "$kintsugi" "${common[@]}" --dp 4 --ep 2 | tail -1)"
python3 - "$serial" "$ep2" "$ep2_dp4" <<'PY'
import json, sys
a = json.loads(sys.argv[1])
for text, dp in ((sys.argv[2], 2), (sys.argv[3], 4)):
    b = json.loads(text)
    if b["layout"].get("ep") != 2 or b["layout"].get("dp") != dp:
        sys.exit(f"FAIL: the JSON layout is ep {b['layout'].get('ep')} x dp {b['layout'].get('dp')}, not ep 2 x dp {dp}")
    print("serial", a["loss"], f"ep 2 x dp {dp}", b["loss"])
    if abs(a["loss"] - b["loss"]) > 1e-6 * abs(a["loss"]):
        sys.exit(1)
PY
