#!/usr/bin/env bash
# hf_check.sh -- does an exported model compute, under Hugging Face's conventions, what kintsugi
# computes? For every prefix of a prompt (word by word) it asks both for the greedy next token:
# kintsugi `generate --temperature 0 --tokens 1` on the model directory, and
# bench/pytorch/hf_greedy.py (plain PyTorch with transformers' conventions written out) on the
# exported safetensors. Prints each prefix's two answers and the count that agree.
#
# Usage: bench/hf_check.sh MODEL_DIR EXPORT.safetensors ["prompt text"]
# Needs: build/kintsugi, data/gpt2-tokenizer, Debian's python3-torch (scripts/setup.sh --bench).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"
TOK="$ROOT/data/gpt2-tokenizer"
model="$1" export="$2"
prompt="${3:-The jury further said in term-end presentments that the City Executive Committee, which had over-all charge of the election, deserves the praise and thanks of the City of Atlanta for the manner in which the election was conducted.}"
read -r -a words <<<"$prompt"
agree=0 total=0
for ((k = 1; k <= ${#words[@]}; k++)); do
  prefix="${words[*]:0:k}"
  ours=$("$KINTSUGI" generate --checkpoint "$model" --tokenizer "$TOK" --prompt "$prefix" \
    --tokens 1 --temperature 0 --threads 1 2>/dev/null)
  ours="${ours#"$prefix"}"
  ids=$(printf '%s' "$prefix" | "$KINTSUGI" encode --tokenizer "$TOK")
  theirs=$(/usr/bin/python3 "$ROOT/bench/pytorch/hf_greedy.py" "$export" "$ids" 1 "$TOK/encoder.json")
  total=$((total + 1))
  if [[ "$ours" == "$theirs" ]]; then agree=$((agree + 1)); mark="="; else mark="DIFFERENT"; fi
  printf '%-60.60s | kintsugi %-12q | pytorch %-12q %s\n' "$prefix" "$ours" "$theirs" "$mark"
done
echo "hf_check: $agree of $total greedy next tokens agree"
[[ $agree == "$total" ]]
