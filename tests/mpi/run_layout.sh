#!/usr/bin/env bash
# One multi-rank layout against a reference run (the serial one, unless REFERENCE and RTOL say
# otherwise): trains the same tiny model from the same seed under mpirun, then checks losses,
# final weights and communication volume.
# Usage: [REFERENCE=name RTOL=0 WEIGHT_RTOL=x] run_layout.sh KINTSUGI CHECK_RUN OUT_DIR NAME RANKS [flags...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" name="$4" ranks="$5"
shift 5
reference="${REFERENCE:-serial}"
rtol="${RTOL:-1e-5}"
weight_rtol="${WEIGHT_RTOL:-$rtol}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$out/$name"
mpirun -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train --out "$out/$name" "$@"
"$check" compare "$out/$reference" "$out/$name" "$rtol" "$weight_rtol"
"$check" comm "$out/$name"
"$check" memory "$out/$name"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$out/$name"
