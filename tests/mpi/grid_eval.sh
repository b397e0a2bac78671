#!/usr/bin/env bash
# `kintsugi eval` of a saved model on a 3D tensor grid prints the loss of the same windows that
# one process prints (docs/parallelism.md, 3D tensor parallelism), and says the grid it ran on.
# Usage: grid_eval.sh KINTSUGI MODEL_DIR DATA GRID RANKS
set -euo pipefail
kintsugi="$1" model="$2" data="$3" grid="$4" ranks="$5"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(eval --checkpoint "$model" --data "$data" --windows 8 --micro-batch 2 --json)
serial="$("$kintsugi" "${common[@]}")"
grid_out="$(mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" "${common[@]}" \
  --tensor-grid "$grid")"
# The grid is part of the layout it reports, in JSON and in the text header.
python3 - "$grid_out" "$grid" <<'PY'
import json, sys
got = json.loads(sys.argv[1])["layout"].get("tensor_grid")
if got != [int(x) for x in sys.argv[2].split(",")]:
    sys.exit(f"FAIL: the JSON layout's tensor_grid is {got}, not {sys.argv[2]}")
PY
header="$(mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" eval --checkpoint "$model" \
  --data "$data" --windows 2 --micro-batch 2 --tensor-grid "$grid" | head -n 1)"
echo "$header"
grep -q "tensor grid ${grid//,/ x }" <<<"$header" || { echo "FAIL: the header omits the grid"; exit 1; }
loss() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["loss"])'; }
a="$(loss <<<"$serial")" b="$(loss <<<"$grid_out")"
python3 -c "import sys; a, b = float('$a'), float('$b'); print('serial', a, 'grid', b); sys.exit(abs(a - b) > 1e-6 * abs(a))"
