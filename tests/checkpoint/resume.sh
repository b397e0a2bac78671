#!/usr/bin/env bash
# Resume (and reshard): an uninterrupted run in one layout writes checkpoints; a second run in
# another layout (or the same) resumes from the checkpoint of step 2 and must train the
# remaining steps with the same losses and end with the same weights (relative RTOL; 0: bit for
# bit).
# Usage: [RTOL=x] resume.sh KINTSUGI CHECK_RUN OUT_DIR NAME "WRITER: ranks flags" "READER: ranks flags" [common flags...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" name="$4" writer="$5" reader="$6"
shift 6
rtol="${RTOL:-1e-5}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir"

launch() {  # RANKS FLAGS... -- the rest
  local ranks="$1"
  shift
  if ((ranks == 1)); then "$kintsugi" train "$@"; else
    mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "$@"; fi
}

read -r -a w <<<"$writer"
read -r -a r <<<"$reader"
launch "${w[0]}" "${w[@]:1}" "$@" --save-every 2 --out "$dir/full"
test -f "$dir/full/checkpoints/step-00000002/manifest.json"
launch "${r[0]}" "${r[@]:1}" "$@" --resume "$dir/full/checkpoints/step-00000002" --out "$dir/resumed" \
  | tee "$dir/resumed.log"
grep -q "resumed from .*step-00000002 at step 2" "$dir/resumed.log"
"$check" resumed "$dir/full" "$dir/resumed" "$rtol"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
