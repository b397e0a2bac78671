#!/usr/bin/env bash
# Export and import: a trained model exported to Hugging Face safetensors (from the saved model
# and from a training checkpoint: the same bytes) is checked by an independent reader, and a run
# started from it with --init-from evaluates to the same validation loss and, after one step
# with a learning rate of 1e-30 (too small to move any weight by one float32 ulp; the learning
# rate must be positive), holds the exported weights (relative 1e-12: only an exact zero could
# move, to +-1e-30).
# Usage: export_import.sh KINTSUGI CHECK_RUN OUT_DIR NAME [flags...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" name="$4"
shift 4
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir" && mkdir -p "$dir"  # its logs sit beside it: the parent must exist too
"$kintsugi" train "$@" --save-every 4 --out "$dir/a" | tee "$dir.a.log"
"$kintsugi" export --checkpoint "$dir/a/model" --out "$dir/hf/model.safetensors"
"$kintsugi" export --checkpoint "$dir/a/checkpoints/step-00000004" --out "$dir/hf2/model.safetensors"
cmp "$dir/hf/model.safetensors" "$dir/hf2/model.safetensors"
# The model directory carries data.tokenizer's files and the export copies them: the same ids.
text="Exports carry their tokenizer: ids 1234, naïve café, 東京 🙂"
ids=$(printf '%s' "$text" | "$kintsugi" encode --tokenizer "$dir/hf")
[[ -n "$ids" && "$ids" == "$(printf '%s' "$text" | "$kintsugi" encode --tokenizer "$dir/a/model")" ]]
# Without the specials a post-processor adds (Llama's <s>), the ids decode to the text.
plain=$(printf '%s' "$text" | "$kintsugi" encode --no-specials --tokenizer "$dir/hf")
[[ "$(printf '%s' "$plain" | "$kintsugi" decode --tokenizer "$dir/hf")" == "$text" ]]
python3 "$here/verify_hf_export.py" "$dir/hf/model.safetensors" "$dir/a/model"

"$kintsugi" train "$@" --init-from "$dir/hf/model.safetensors" --set train.steps=1 \
  --set train.lr=1e-30 --set train.min_lr=1e-30 --out "$dir/b" | tee "$dir.b.log"
"$check" weights "$dir/a" "$dir/b" 1e-12
"$here/same_val_loss.sh" "$dir.a.log" "$dir.b.log"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
