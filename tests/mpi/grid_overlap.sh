#!/usr/bin/env bash
# parallel.tensor_grid_overlap against the blocking path: the same grid trains with overlap on
# and off; losses and weights must be the same bits, the bytes the model's, and the Chrome
# trace must show grid collectives overlapping grid GEMMs with overlap on and none with it off.
# Usage: grid_overlap.sh KINTSUGI CHECK_RUN OUT_DIR NAME RANKS [train flags...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" name="$4" ranks="$5"
shift 5
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for overlap in true false; do
  run="$out/${name}_overlap_$overlap"
  rm -rf "$run" "$run.trace.json"
  mpirun -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train --out "$run" \
    --trace "$run.trace.json" --set parallel.tensor_grid_overlap=$overlap "$@"
  "$check" comm "$run"
done
"$check" compare "$out/${name}_overlap_false" "$out/${name}_overlap_true" 0 0
python3 "$here/grid_overlap_trace.py" "$out/${name}_overlap_true.trace.json" on
python3 "$here/grid_overlap_trace.py" "$out/${name}_overlap_false.trace.json" off
