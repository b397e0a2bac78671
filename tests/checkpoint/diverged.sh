#!/usr/bin/env bash
# A run that diverges (train.lr = 1e30: the weights jump to ~1e30, still finite, after one
# update) is never saved: resumed from a good checkpoint of step 2, it stops after step 3 with
# one line naming that checkpoint, and writes no checkpoint of its own (so no `latest` that
# every later --resume auto would fail on).
# Usage: diverged.sh KINTSUGI GOOD_CHECKPOINT OUT_DIR [flags...]
set -uo pipefail
kintsugi="$1" good="$2" out="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1
dir="$out/diverged"
rm -rf "$dir" && mkdir -p "$dir"
"$here/../cli/expect_error.sh" \
  "the run diverged: after step 3 the validation loss is .*step 3 was not saved; resume from $good" \
  "$kintsugi" train "$@" --set train.lr=1e30 --set train.steps=4 --save-every 1 \
  --resume "$good" --out "$dir/run" || exit 1
if compgen -G "$dir/run/checkpoints/step-*" >/dev/null; then
  echo "FAIL: a diverged state was saved: $(ls "$dir/run/checkpoints")"
  exit 1
fi
echo "no diverged state was saved"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
