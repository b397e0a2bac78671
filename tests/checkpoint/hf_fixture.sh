#!/usr/bin/env bash
# A Hugging Face folder whose config.json is written as the family's models ship it
# (tests/fixtures/hf/FAMILY/config.json: Llama 3.1 with its llama3 rope_scaling and a head_dim,
# Mistral with its sliding_window, Qwen2.5 with use_sliding_window false, max_window_layers and a
# tied head), its weights made by make_hf_folder.py in those shapes (Qwen2's q/k/v biases):
#   - `import` and `export` give back every tensor of the folder bit for bit;
#   - a run started from the folder trains a few steps, serially and on LAYOUT (by default
#     tp 2 x pp 2 x dp 2 with sequence parallelism and ZeRO-1; losses and weights within 1e-5 of
#     the serial run);
#   - its export has the family's config.json (model_type, architectures and the fields that
#     fix the arithmetic equal to the fixture's) and checks under verify_hf_export.py;
#   - a run started from that export holds the trained weights (relative 1e-12 after a step at
#     a learning rate of 1e-30) with the same validation loss.
# Mixtral, Qwen2-MoE and Qwen3-MoE folders (docs/moe.md) are the same test with the router and
# experts' tensors, on a layout without tp (their experts are not split over tp).
# Usage: hf_fixture.sh KINTSUGI CHECK_RUN OUT_DIR DATA_DIR FIXTURE_DIR NAME [LAYOUT FLAGS...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" data="$4" fixture="$5" name="$6"
layout=("${@:7}")
[[ ${#layout[@]} -gt 0 ]] || layout=(--tp 2 --pp 2 --dp 2 --sequence-parallel --zero 1)
ranks=1
for ((k = 0; k + 1 < ${#layout[@]}; k++)); do
  case "${layout[k]}" in --tp | --pp | --dp) ranks=$((ranks * layout[k + 1])) ;; esac
done
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir" && mkdir -p "$dir/folder"
python3 "$here/make_hf_folder.py" "$dir/folder" "$dir/single.safetensors" llama 2 bf16 \
  "config=$fixture/config.json"
cmp "$fixture/config.json" "$dir/folder/config.json"
cp "$data/gpt2-512-tokenizer/"* "$dir/folder/"

# The folder through import and export, bit for bit.
"$kintsugi" import --from "$dir/folder" --out "$dir/imported" >/dev/null
"$kintsugi" export --checkpoint "$dir/imported" --out "$dir/back/model.safetensors" >/dev/null
python3 "$here/same_hf_tensors.py" "$dir/folder" "$dir/back"

cat >"$dir/run.toml" <<TOML
[data]
train = "$data/brown/gpt2-512/train.bin"
val = "$data/brown/gpt2-512/val.bin"
[train]
steps = 3
global_batch = 8
micro_batch = 1
warmup_steps = 1
eval_every = 0
eval_sequences = 3
eps = 1e-4
TOML
"$kintsugi" train --config "$dir/run.toml" --init-from "$dir/folder" --out "$dir/a" \
  | tee "$dir/a.log"
mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train --config "$dir/run.toml" \
  --init-from "$dir/folder" "${layout[@]}" --out "$dir/a_3d" | tee "$dir/a_3d.log"
"$check" compare "$dir/a" "$dir/a_3d" 1e-5 1e-5

"$kintsugi" export --checkpoint "$dir/a/model" --out "$dir/hf/model.safetensors"
python3 "$here/same_hf_config.py" "$fixture/config.json" "$dir/hf/config.json"
python3 "$here/verify_hf_export.py" "$dir/hf/model.safetensors" "$dir/a/model"
"$kintsugi" train --config "$dir/run.toml" --init-from "$dir/hf" --set train.steps=1 \
  --set train.lr=1e-30 --set train.min_lr=1e-30 --out "$dir/b" | tee "$dir/b.log"
"$check" weights "$dir/a" "$dir/b" 1e-12
"$here/same_val_loss.sh" "$dir/a.log" "$dir/b.log"
"$here/../support/remove_on_pass.sh" "$dir"
