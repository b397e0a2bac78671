#!/usr/bin/env bash
# model.seq_len changed on resume and on fine-tuning (docs/checkpoints.md "Changing the sequence
# length"): FAMILY llama (RoPE) or bloom (ALiBi) resume and fine-tune at half and twice the
# length; gpt2 (learned positions) at half the length, and refuses twice the length with one
# line naming the table's size.
# Usage: seq_len_change.sh KINTSUGI EXPECT_ERROR OUT_DIR FAMILY [train flags with seq_len 32...]
set -euo pipefail
kintsugi="$1" expect_error="$2" out="$3" family="$4"
shift 4
export OMP_NUM_THREADS=1
dir="$out/seq_len_$family"
rm -rf "$dir" && mkdir -p "$dir"
"$kintsugi" train "$@" --save-every 2 --out "$dir/base" >/dev/null
ckpt="$dir/base/checkpoints/step-00000002"
lengths=(16 64)
[[ "$family" == gpt2 ]] && lengths=(16)
for seq in "${lengths[@]}"; do
  "$kintsugi" train "$@" --set model.seq_len=$seq --resume "$ckpt" --out "$dir/resume$seq" \
    >"$dir/resume$seq.log"
  grep -q "resumed from .* at step 2" "$dir/resume$seq.log"
  "$kintsugi" train "$@" --set model.seq_len=$seq --set train.steps=1 \
    --init-from "$dir/base/model" --out "$dir/init$seq" >"$dir/init$seq.log"
  grep -q "^done: 1 step" "$dir/init$seq.log"
  echo "$family: seq_len 32 -> $seq resumed and fine-tuned"
done
if [[ "$family" == gpt2 ]]; then
  for source in "$ckpt" "$dir/base/model"; do
    flag=--init-from
    [[ "$source" == "$ckpt" ]] && flag=--resume
    "$expect_error" "has learned position embeddings for 32 positions \\(model.family = gpt2\\), model.seq_len = 64 would use positions no weight was trained for: set model.seq_len <= 32" \
      "$kintsugi" train "$@" --set model.seq_len=64 $flag "$source" --out "$dir/refused"
  done
  echo "gpt2: seq_len 32 -> 64 refused"
fi
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
