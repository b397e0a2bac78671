#!/usr/bin/env bash
# `kintsugi generate` on a SentencePiece-style tokenizer (Llama 2) keeps the spaces between
# words: it prints each token as the text it adds after the tokens before it, while Llama's
# decoder drops the leading space of a token decoded on its own ("The jury said thatthework").
# A model trained two steps on Llama 2's ids samples 30 tokens (at temperature 1: mostly word
# starts with "▁"); their text must hold spaces, and a longer run begins with the same text.
# Usage: generate_spaces.sh KINTSUGI OUT_DIR DATA_DIR [train flags...]
set -euo pipefail
kintsugi="$1" dir="$2" data="$3"
shift 3
export OMP_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir"
"$kintsugi" train "$@" --set train.steps=2 --set model.vocab_size=32000 \
  --set data.train="$data/brown/llama2/train.bin" --set data.val="$data/brown/llama2/val.bin" \
  --set data.tokenizer="$data/llama2-tokenizer" --out "$dir/run" >/dev/null
sample=(--checkpoint "$dir/run/model" --prompt "The jury said" --temperature 1 --top-k 0 --seed 3)
text="$("$kintsugi" generate "${sample[@]}" --tokens 30 2>/dev/null)"
echo "generated: $text"
generated="${text#The jury said}"
spaces="${generated//[^ ]/}"
((${#spaces} >= 5)) || { echo "FAIL: ${#spaces} spaces in 30 sampled Llama tokens"; exit 1; }
longer="$("$kintsugi" generate "${sample[@]}" --tokens 40 2>/dev/null)"
[[ "$longer" == "$text"* ]] || { echo "FAIL: 40 tokens do not begin with the 30: $longer"; exit 1; }
echo "generate: Llama text keeps its spaces"
