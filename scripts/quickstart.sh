#!/usr/bin/env bash
# The first command of the README: install, build, fetch the demo data, train the tiny GPT on
# the Brown corpus, and sample from it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
scripts/build.sh
scripts/fetch_data.sh build/kintsugi
build/kintsugi train --config configs/gpt-tiny.toml --out runs/gpt-tiny
echo
echo "== a sample from the trained model"
build/kintsugi generate --checkpoint runs/gpt-tiny/model --prompt "The jury said" --tokens 60 \
  --seed 1
echo
echo "Results: runs/gpt-tiny/metrics.jsonl (one JSON object per step), runs/gpt-tiny/loss.svg"
echo "(loss curve), runs/gpt-tiny/model (the trained weights)."
