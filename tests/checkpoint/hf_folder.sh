#!/usr/bin/env bash
# --init-from FOLDER with a hand-made Hugging Face folder (make_hf_folder.py: shards and index,
# bf16/f32/mixed, tied or untied head, GQA, Qwen3's q_norm and k_norm): the run takes the model's shape from config.json and
# the tokenizer from the folder (the run's config names neither), and starts where the same
# weights as one float32 file with the shape given by hand start: the same losses and weights
# bit for bit in one process, and on 2 ranks with tensor parallelism (tp 2) and with pipeline
# stages (pp 2), each rank reading only its slices (losses within 1e-5, weights 1e-12: a step at
# a learning rate of 1e-30 moves no weight).
# Usage: hf_folder.sh KINTSUGI CHECK_RUN OUT_DIR DATA_DIR NAME FAMILY SHARDS DTYPE [gqa] [tied] [noprefix]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" data="$4" name="$5" family="$6" shards="$7" dtype="$8"
shift 8
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir" && mkdir -p "$dir/folder"
python3 "$here/make_hf_folder.py" "$dir/folder" "$dir/single.safetensors" "$family" "$shards" \
  "$dtype" "$@"
cp "$data/gpt2-512-tokenizer/"* "$dir/folder/"
if ((shards > 1)); then
  test -f "$dir/folder/model.safetensors.index.json"
  test "$(ls "$dir/folder" | grep -c "^model-0000[1-9]-of-0000$shards.safetensors$")" -eq "$shards"
fi
cat >"$dir/run.toml" <<TOML
[data]
train = "$data/brown/gpt2-512/train.bin"
val = "$data/brown/gpt2-512/val.bin"
[train]
steps = 1
global_batch = 8
micro_batch = 1
lr = 1e-30
min_lr = 1e-30
warmup_steps = 0
eval_every = 0
eval_batches = 3
eps = 1e-4
TOML
# The same model by hand, for the single file.
kv=4
[[ " $* " == *" gqa "* ]] && kv=2
if [[ "$family" == gpt2 ]]; then
  shape=(--set model.family=gpt2 --set model.d_ff=128)
elif [[ "$family" == qwen3 ]]; then
  shape=(--set model.family=qwen3 --set model.d_ff=64 --set model.n_kv_head=$kv
         --set model.head_dim=16 --set model.rope_theta=1000000 --set model.norm_eps=1e-6)
else
  shape=(--set model.family=llama --set model.d_ff=64 --set model.n_kv_head=$kv
         --set model.rope_theta=500000)
fi
# A tied folder's model ties its head too (no lm_head in the file).
[[ " $* " == *" tied "* ]] && shape+=(--set model.tie_embeddings=tied)
shape+=(--set model.n_layer=2 --set model.d_model=32 --set model.n_head=4 --set model.seq_len=64
        --set data.tokenizer="$data/gpt2-512-tokenizer" --set model.vocab_size=512)

"$kintsugi" train --config "$dir/run.toml" --init-from "$dir/single.safetensors" "${shape[@]}" \
  --out "$dir/file" | tee "$dir/file.log"
"$kintsugi" train --config "$dir/run.toml" --init-from "$dir/folder" --out "$dir/serial" \
  | tee "$dir/serial.log"
grep -q "^initial weights from $dir/folder (weights only" "$dir/serial.log"
"$check" compare "$dir/file" "$dir/serial" 0 0
for layout in "--tp 2" "--pp 2"; do
  sub="$dir/ranks_${layout// /}"
  mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train --config "$dir/run.toml" \
    --init-from "$dir/folder" $layout --out "$sub" | tee "$sub.log"
  "$check" compare "$dir/file" "$sub" 1e-5 1e-12
done
# The folder's tokenizer was the run's: saved with the model, it gives the folder's ids.
text="Hand-made folders carry their tokenizer: naïve café"
ids=$(printf '%s' "$text" | "$kintsugi" encode --tokenizer "$dir/folder")
[[ -n "$ids" && "$ids" == "$(printf '%s' "$text" | "$kintsugi" encode --tokenizer "$dir/serial/model")" ]]
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
