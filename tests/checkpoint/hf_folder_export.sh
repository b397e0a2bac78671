#!/usr/bin/env bash
# `kintsugi export --max-shard-size` writes transformers' sharded layout (shards of at most that
# size, model.safetensors.index.json), and a re-export to the same folder without it leaves only
# the single file, byte for byte the one a plain export writes. A run started with
# --init-from on the exported folder (the model's shape from config.json, checked against the
# model keys the flags give) starts where the single file starts: bit for bit in one process,
# and on 2 ranks with tp 2 and with pp 2 (losses within 1e-5, weights 1e-12); and it holds the
# trained weights.
# Usage: hf_folder_export.sh KINTSUGI CHECK_RUN OUT_DIR NAME MAX_SHARD_SIZE [run flags...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" name="$4" max="$5"
shift 5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir" && mkdir -p "$dir"
"$kintsugi" train "$@" --out "$dir/a" | tee "$dir/a.log"
"$kintsugi" export --checkpoint "$dir/a/model" --out "$dir/one/model.safetensors"
"$kintsugi" export --checkpoint "$dir/a/model" --out "$dir/sharded/model.safetensors"
"$kintsugi" export --checkpoint "$dir/a/model" --out "$dir/sharded/model.safetensors" \
  --max-shard-size "$max"
shards=$(ls "$dir/sharded" | grep -c '^model-[0-9]\{5\}-of-[0-9]\{5\}\.safetensors$')
echo "$shards shards"
((shards >= 3))
test -f "$dir/sharded/model.safetensors.index.json"
test ! -e "$dir/sharded/model.safetensors"  # transformers would read it instead of the index
# Back to one file: the index and its shards go.
cp -r "$dir/sharded" "$dir/resingle"
"$kintsugi" export --checkpoint "$dir/a/model" --out "$dir/resingle/model.safetensors"
test ! -e "$dir/resingle/model.safetensors.index.json"
test -z "$(ls "$dir/resingle" | grep '^model-' || true)"
cmp "$dir/one/model.safetensors" "$dir/resingle/model.safetensors"

start=(--set train.steps=1 --set train.lr=1e-30 --set train.min_lr=1e-30)
"$kintsugi" train "$@" "${start[@]}" --init-from "$dir/one/model.safetensors" --out "$dir/file"
"$kintsugi" train "$@" "${start[@]}" --init-from "$dir/sharded" --out "$dir/folder"
"$check" compare "$dir/file" "$dir/folder" 0 0
"$check" weights "$dir/a" "$dir/folder" 1e-12
for layout in "--tp 2" "--pp 2"; do
  sub="$dir/folder_${layout// /}"
  mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train "$@" "${start[@]}" \
    --init-from "$dir/sharded" $layout --out "$sub"
  "$check" compare "$dir/file" "$sub" 1e-5 1e-12
done
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
