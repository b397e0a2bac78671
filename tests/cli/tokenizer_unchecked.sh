#!/usr/bin/env bash
# What used to train with the tokenizer check switched off (docs/data.md "Which tokenizer made
# the ids"): a Megatron dataset, which records no tokenizer, is held to data.tokenizer's
# vocabulary by its largest id (GPT-2 ids under Llama 2's tokenizer refused; a fitting one trains
# with one note saying what could not be checked; eval alike against the model's tokenizer);
# a data.tokenizer that does not load is an error naming the key, not a note: Llama 2's
# tokenizer.json beside GPT-2's tokenizer_config.json, a tokenizer.json that is not JSON.
# Usage: tokenizer_unchecked.sh KINTSUGI EXPECT_ERROR OUT_DIR DATA_DIR [train flags...]
set -euo pipefail
kintsugi="$1" expect_error="$2" out="$3" data="$4"
shift 4
export OMP_NUM_THREADS=1
dir="$out/tokenizer_unchecked"
rm -rf "$dir" && mkdir -p "$dir"
head -c 100000 "$data/brown/train.txt" >"$dir/text.txt"
"$kintsugi" data tokenize --tokenizer "$data/gpt2-tokenizer" --format megatron \
  --out "$dir/gpt2" "$dir/text.txt" >/dev/null
run=("$@" --set data.train="$dir/gpt2" --set data.val="$dir/gpt2" --set train.steps=1)
"$expect_error" "gpt2.bin holds token id [0-9]+ \(at position [0-9]+\), outside the vocabulary of data.tokenizer .*llama2-tokenizer \(vocabulary 32000, fingerprint [0-9a-f]{16}\): its ids were made with another tokenizer; use the data's own tokenizer \(or pass --allow-tokenizer-mismatch" \
  "$kintsugi" train "${run[@]}" --set data.tokenizer="$data/llama2-tokenizer" --out "$dir/refused"
"$kintsugi" train "${run[@]}" --set data.tokenizer="$data/gpt2-tokenizer" --out "$dir/run" \
  >"$dir/run.log"
note="^note: .*gpt2.bin records no tokenizer \(a Megatron dataset has no place for one\): only its largest id \([0-9]+\) was compared with the vocabulary of data.tokenizer .*gpt2-tokenizer \(50257 ids\); whether that tokenizer made its ids could not be checked$"
grep -Eq "$note" "$dir/run.log" || { echo "no note on what was not checked:"; cat "$dir/run.log"; exit 1; }
[[ $(grep -c "records no tokenizer" "$dir/run.log") == 1 ]]  # one line for train and val
# eval: the Megatron data's largest id against the vocabulary the model records (a model of
# GPT-2's size trained on Llama 2's ids: GPT-2's ids fit its embeddings, not its tokenizer).
"$kintsugi" train "$@" --set data.train="$data/brown/llama2/train.bin" --set train.steps=1 \
  --set data.val="$data/brown/llama2/val.bin" --set data.tokenizer="$data/llama2-tokenizer" \
  --out "$dir/llama" >/dev/null
"$expect_error" "gpt2.bin holds token id [0-9]+ \(at position [0-9]+\), outside the vocabulary of --checkpoint .*llama/model \(vocabulary 32000" \
  "$kintsugi" eval --checkpoint "$dir/llama/model" --data "$dir/gpt2" --windows 1
"$kintsugi" eval --checkpoint "$dir/run/model" --data "$dir/gpt2" --windows 1 >"$dir/eval.log"
grep -Eq "^note: .*gpt2.bin records no tokenizer .*compared with the vocabulary of --checkpoint .*run/model \(50257 ids\)" \
  "$dir/eval.log" || { echo "eval: no note on what was not checked:"; cat "$dir/eval.log"; exit 1; }
# data.tokenizer that does not load: refused by key and file, before anything trains.
mkdir -p "$dir/mixed" "$dir/broken"
cp "$data/llama2-tokenizer/tokenizer.json" "$dir/mixed/"
cp "$data/gpt2-tokenizer/"* "$dir/mixed/"
printf '{"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}\n' \
  >"$dir/mixed/tokenizer_config.json"
"$expect_error" "^kintsugi: error: data.tokenizer: .*mixed/tokenizer.json: tokenizer_config.json's eos_token names \"<\|endoftext\|>\", which is not in the vocabulary" \
  "$kintsugi" train "${run[@]}" --set data.tokenizer="$dir/mixed" --out "$dir/mixed-run"
echo "not json" >"$dir/broken/tokenizer.json"
"$expect_error" "^kintsugi: error: data.tokenizer: .*broken/tokenizer.json is not valid JSON" \
  "$kintsugi" train "${run[@]}" --set data.tokenizer="$dir/broken" --out "$dir/broken-run"
"$expect_error" "^kintsugi: error: data.tokenizer is empty: name the data's tokenizer" \
  "$kintsugi" train "${run[@]}" --set 'data.tokenizer=""' --out "$dir/empty-run"
echo "tokenizer checks: nothing trains unchecked"
