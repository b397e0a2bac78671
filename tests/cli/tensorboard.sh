#!/usr/bin/env bash
# --tensorboard: a 2-stage pipeline job (so that communication and bubble tags appear) writes
# one event file (rank 0 only), which an independent reader checks against metrics.jsonl.
# Usage: tensorboard.sh KINTSUGI CHECKER OUT_DIR [train flags...]
set -euo pipefail
kintsugi="$1" checker="$2" out="$3"
shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$out"
mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train "$@" --pp 2 \
  --set train.eval_every=2 --out "$out/run" --tensorboard "$out/tb"
python3 "$checker" "$out/tb" "$out/run/metrics.jsonl"
