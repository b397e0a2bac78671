#!/usr/bin/env bash
# Long-context continuation of a downloaded model under context parallelism: a hand-made Llama
# 3.1 folder (tests/fixtures/hf/llama3.1: llama3 rope_scaling, trained to 64 positions) is
# continued at twice its length, 128 tokens, on cp 2 ranks and serially (losses and weights
# within 1e-5), and the export of the cp run has the folder's config.json, its context
# (max_position_embeddings) now 128.
# Usage: cp_long_context_folder.sh KINTSUGI CHECK_RUN OUT_DIR DATA_DIR FIXTURE_DIR
set -euo pipefail
kintsugi="$1" check="$2" out="$3" data="$4" fixture="$5"
here="$(cd "$(dirname "$0")/.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/cp_long_context_folder"
rm -rf "$dir" && mkdir -p "$dir/folder"
python3 "$here/checkpoint/make_hf_folder.py" "$dir/folder" "$dir/single.safetensors" llama 2 bf16 \
  "config=$fixture/config.json"
cp "$data/gpt2-512-tokenizer/"* "$dir/folder/"
run=(train --init-from "$dir/folder" --set model.seq_len=128
     --set data.train="$data/brown/gpt2-512/train.bin" --set data.val="$data/brown/gpt2-512/val.bin"
     --set train.steps=3 --set train.global_batch=4 --set train.micro_batch=1
     --set train.warmup_steps=1 --set train.eval_every=0 --set train.eval_sequences=2
     --set train.eps=1e-4)
"$kintsugi" "${run[@]}" --out "$dir/serial" >"$dir/serial.log"
mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" "${run[@]}" --cp 2 --out "$dir/cp2" \
  | tee "$dir/cp2.log"
"$check" compare "$dir/serial" "$dir/cp2" 1e-5 1e-5
"$kintsugi" export --checkpoint "$dir/cp2/model" --out "$dir/hf/model.safetensors"
python3 "$here/checkpoint/same_hf_config.py" "$fixture/config.json" "$dir/hf/config.json" 128
"$here/support/remove_on_pass.sh" "$dir"
