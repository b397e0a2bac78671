#!/usr/bin/env bash
# The first command of the README: install, build, fetch the demo data, train the tiny GPT on
# the Brown corpus with 3D parallelism (8 ranks: tensor 2 x pipeline 2 x data 2, sharing this
# machine's cores), and sample from it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
scripts/build.sh --target kintsugi -DKINTSUGI_TESTS=OFF -DKINTSUGI_BENCH=OFF
scripts/fetch_data.sh build/kintsugi
# OpenMPI refuses to run as root unless told it is intended.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -q -np 8 --oversubscribe --bind-to none build/kintsugi train \
  --config configs/gpt-tiny.toml --tp 2 --pp 2 --dp 2 --schedule 1f1b \
  --out runs/gpt-tiny --overwrite --trace runs/gpt-tiny/trace.json
echo
echo "== a sample from the trained model"
build/kintsugi generate --checkpoint runs/gpt-tiny/model --prompt "The jury said" --tokens 60 \
  --seed 1
echo
echo "Results: runs/gpt-tiny/metrics.jsonl (one JSON object per step), runs/gpt-tiny/loss.svg"
echo "(loss curve), runs/gpt-tiny/trace.json (the last step of every rank: open it in"
echo "https://ui.perfetto.dev or chrome://tracing), runs/gpt-tiny/model (the trained weights)."
