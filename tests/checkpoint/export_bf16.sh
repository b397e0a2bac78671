#!/usr/bin/env bash
# Which weights an export of a bf16 run holds (docs/checkpoints.md "Which weights an export
# holds"): model/ records weights_dtype bf16 and exports as BF16 tensors with torch_dtype
# bfloat16, equal to its weights (the independent reader widens every value and compares it
# exactly: nothing is rounded twice); the training checkpoint of the same step exports its f32
# master weights as F32 with torch_dtype float32, and with --dtype bf16 rounds them (changing
# most) to model/'s export byte for byte; each log line says what it wrote and from
# what. A bf16 run started from the BF16 export (a model folder) holds the exported weights after
# one step of learning rate 1e-30 (relative 1e-12: only an exact zero could move).
# Usage: export_bf16.sh KINTSUGI CHECK_RUN OUT_DIR NAME [flags...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" name="$4"
shift 4
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir" && mkdir -p "$dir"
"$kintsugi" train "$@" --precision bf16 --save-every 4 --out "$dir/a" > "$dir.a.log"
grep -q '"weights_dtype": "bf16"' "$dir/a/model/manifest.json"
ckpt="$dir/a/checkpoints/step-00000004"

"$kintsugi" export --checkpoint "$dir/a/model" --out "$dir/model/model.safetensors" | tee "$dir.log"
grep -q "bf16 tensors (torch_dtype bfloat16): the bf16 working weights of the saved model .*/a/model (step 4), exactly$" "$dir.log"
python3 "$here/verify_hf_export.py" "$dir/model/model.safetensors" "$dir/a/model"

"$kintsugi" export --checkpoint "$ckpt" --out "$dir/masters/model.safetensors" | tee "$dir.log"
grep -q "f32 tensors (torch_dtype float32): the f32 master weights of the training checkpoint .*step-00000004 (step 4, a bf16 run), exactly$" "$dir.log"
grep -q '"torch_dtype": "float32"' "$dir/masters/config.json"

# Rounding changes master weights (were they all bf16 values, the test could not tell the two
# sources apart).
"$kintsugi" export --checkpoint "$ckpt" --out "$dir/rounded/model.safetensors" --dtype bf16 | tee "$dir.log"
grep -q "bf16 tensors (torch_dtype bfloat16): the f32 master weights .*, rounded to bf16 .*; [1-9][0-9]* of [0-9]* values changed)$" "$dir.log"
cmp "$dir/model/model.safetensors" "$dir/rounded/model.safetensors"
cmp "$dir/model/config.json" "$dir/rounded/config.json"

"$kintsugi" train "$@" --precision bf16 --init-from "$dir/model" --set train.steps=1 \
  --set train.lr=1e-30 --set train.min_lr=1e-30 --out "$dir/b" > "$dir.b.log"
"$check" weights "$dir/a" "$dir/b" 1e-12
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
