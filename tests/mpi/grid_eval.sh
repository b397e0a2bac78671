#!/usr/bin/env bash
# `kintsugi eval` of a saved model on a 3D tensor grid prints the loss of the same windows that
# one process prints (docs/parallelism.md, 3D tensor parallelism).
# Usage: grid_eval.sh KINTSUGI MODEL_DIR DATA GRID RANKS
set -euo pipefail
kintsugi="$1" model="$2" data="$3" grid="$4" ranks="$5"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(eval --checkpoint "$model" --data "$data" --windows 8 --micro-batch 2 --json)
serial="$("$kintsugi" "${common[@]}")"
grid_out="$(mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" "${common[@]}" \
  --tensor-grid "$grid")"
loss() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["loss"])'; }
a="$(loss <<<"$serial")" b="$(loss <<<"$grid_out")"
python3 -c "import sys; a, b = float('$a'), float('$b'); print('serial', a, 'grid', b); sys.exit(abs(a - b) > 1e-6 * abs(a))"
