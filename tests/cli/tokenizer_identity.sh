#!/usr/bin/env bash
# Token files and models carry their tokenizer's identity (docs/data.md "Which tokenizer made
# the ids"), and every command that combines them refuses a mismatch with one line naming both
# (exit 1) unless --allow-tokenizer-mismatch: train on data of another tokenizer than
# data.tokenizer (a fingerprint from `data tokenize`; a vocabulary size from an old file),
# generate with another tokenizer than the model's or from a model without tokenizer files
# (no silent GPT-2), eval on data of another tokenizer, fine-tune on data of another tokenizer.
# Usage: tokenizer_identity.sh KINTSUGI EXPECT_ERROR OUT_DIR DATA_DIR [train flags...]
set -euo pipefail
kintsugi="$1" expect_error="$2" out="$3" data="$4"
shift 4
export OMP_NUM_THREADS=1
dir="$out/tokenizer_identity"
rm -rf "$dir" && mkdir -p "$dir"
head -c 200000 "$data/brown/train.txt" >"$dir/text.txt"
"$kintsugi" data tokenize --tokenizer "$data/gpt2-tokenizer" --out "$dir/gpt2.bin" "$dir/text.txt" >/dev/null
"$kintsugi" data info "$dir/gpt2.bin" | grep "tokenizer fingerprint [0-9a-f]\{16\}: valid"
run=("$@" --set data.train="$dir/gpt2.bin" --set data.val="$dir/gpt2.bin" --set train.steps=2)
mismatch="was made with the tokenizer of vocabulary 50257, fingerprint [0-9a-f]{16} but data.tokenizer .*llama2-tokenizer with vocabulary 32000, fingerprint [0-9a-f]{16}: their ids mean different text; use the same tokenizer for both \(or pass --allow-tokenizer-mismatch"
"$expect_error" "gpt2.bin $mismatch" \
  "$kintsugi" train "${run[@]}" --set data.tokenizer="$data/llama2-tokenizer" --out "$dir/refused"
"$kintsugi" train "${run[@]}" --set data.tokenizer="$data/llama2-tokenizer" --out "$dir/allowed" \
  --allow-tokenizer-mismatch >"$dir/allowed.log"
grep -q "^warning: .*gpt2.bin was made with" "$dir/allowed.log"
# Llama-tokenized data under GPT-2's tokenizer: refused by the vocabulary size alone when the file
# predates fingerprints (version 1, fetched by an older checkout), with both fingerprints when
# scripts/fetch_data.sh tokenized it with this one (version 2). Version 1 on its own:
# the unit test TokenFile.RecordsTheTokenizerAndReadsVersion1.
"$expect_error" "llama2/train.bin was made with the tokenizer of vocabulary 32000(, fingerprint [0-9a-f]{16})? but data.tokenizer .*gpt2-tokenizer with vocabulary 50257" \
  "$kintsugi" train "$@" --set data.train="$data/brown/llama2/train.bin" \
  --set data.val="$data/brown/llama2/val.bin" --set data.tokenizer="$data/gpt2-tokenizer" \
  --out "$dir/refused2"
"$kintsugi" train "${run[@]}" --set data.tokenizer="$data/gpt2-tokenizer" --out "$dir/run" >/dev/null
grep -q '"xxh3"' "$dir/run/model/manifest.json"
# generate: another tokenizer than the model's is refused, allowed with the flag; a model
# without its tokenizer files is refused, not decoded with GPT-2's.
"$expect_error" "run/model was made with the tokenizer of vocabulary 50257, fingerprint [0-9a-f]{16} but --tokenizer .*llama2-tokenizer with vocabulary 32000" \
  "$kintsugi" generate --checkpoint "$dir/run/model" --tokenizer "$data/llama2-tokenizer" --tokens 2
# Allowed: a warning, then generation goes on; the 2-step model samples any of GPT-2's ids, which
# Llama's tokenizer may not decode (an error after the warning), so only the warning is checked.
"$kintsugi" generate --checkpoint "$dir/run/model" --tokenizer "$data/llama2-tokenizer" \
  --tokens 2 --allow-tokenizer-mismatch >/dev/null 2>"$dir/allowed.err" || true
grep -q "^warning: .*--allow-tokenizer-mismatch given" "$dir/allowed.err"
! grep -q "was made with the tokenizer.*: their ids mean different text" "$dir/allowed.err"
cp -r "$dir/run/model" "$dir/bare" && rm "$dir/bare/vocab.json" "$dir/bare/merges.txt"
"$expect_error" "bare carries no tokenizer files \(it was trained on ids of a tokenizer of vocabulary 50257, fingerprint [0-9a-f]{16}\): give the tokenizer it was trained with" \
  "$kintsugi" generate --checkpoint "$dir/bare" --tokens 2
# eval on data of another tokenizer.
"$expect_error" "run/model was made with the tokenizer of vocabulary 50257, fingerprint [0-9a-f]{16} but .*llama2/val.bin with vocabulary 32000" \
  "$kintsugi" eval --checkpoint "$dir/run/model" --data "$data/brown/llama2/val.bin"
# Fine-tuning on data of another tokenizer (its vocabulary fits the model: no id check catches it).
"$expect_error" "run/model was made with the tokenizer of vocabulary 50257, fingerprint [0-9a-f]{16} but this run's data with vocabulary 32000" \
  "$kintsugi" train "$@" --set data.train="$data/brown/llama2/train.bin" --set train.steps=1 \
  --set data.val="$data/brown/llama2/val.bin" --set data.tokenizer="$data/llama2-tokenizer" \
  --init-from "$dir/run/model" --out "$dir/refused3"
echo "tokenizer identity: every mismatch refused"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
