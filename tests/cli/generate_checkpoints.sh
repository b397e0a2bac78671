#!/usr/bin/env bash
# `kintsugi generate` takes a saved model, which carries its tokenizer (so no path depends on
# the working directory), or a training checkpoint of the same step: the same greedy text. A
# tokenizer directory the user names and that lacks its files is reported as such. The
# key/value cache gives the same text as rerunning the window. A tokenizer with ids past the
# model's vocabulary (Llama 3's for a GPT-2 model) is refused: its prompt ids would embed
# as zero rows.
# Usage: generate_checkpoints.sh KINTSUGI EXPECT_ERROR OUT_DIR TOKENIZER_DIR [train flags...]
set -euo pipefail
kintsugi="$1" expect_error="$2" dir="$3" tokenizer="$4"
shift 4
export OMP_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir/elsewhere"
"$kintsugi" train "$@" --set train.steps=2 --save-every 2 --set data.tokenizer="$tokenizer" \
  --out "$dir/run" >/dev/null
test -f "$dir/run/model/vocab.json" || { echo "FAIL: model/ has no tokenizer"; exit 1; }
cd "$dir/elsewhere"  # no data/ here: the model's own tokenizer must be used
a="$("$kintsugi" generate --checkpoint ../run/model --prompt "The jury" --tokens 8 \
  --temperature 0)"
b="$("$kintsugi" generate --checkpoint ../run/checkpoints/step-00000002 --tokenizer "$tokenizer" \
  --prompt "The jury" --tokens 8 --temperature 0)"
echo "model/: $a"
echo "step-2: $b"
[[ -n "$a" && "$a" == "$b" ]] || { echo "FAIL: different text"; exit 1; }
# The key/value cache changes the cost, not the tokens: sampled (so any change in the logits
# shows) within MICRO_RUN's 32-position window, the same text as rerunning the window for every
# token; past the window the cached run goes on (from the last half of the window) and begins
# with the same text.
sample=(--checkpoint ../run/model --prompt "The jury" --temperature 1 --top-k 0 --seed 3)
cached="$("$kintsugi" generate "${sample[@]}" --tokens 25)"
uncached="$("$kintsugi" generate "${sample[@]}" --tokens 25 --no-kv-cache)"
echo "cached:   $cached"
echo "uncached: $uncached"
[[ -n "$cached" && "$cached" == "$uncached" ]] || { echo "FAIL: the cache changed the text"; exit 1; }
long="$("$kintsugi" generate "${sample[@]}" --tokens 90)"
[[ "$long" == "$cached"* && ${#long} -gt ${#cached} ]] ||
  { echo "FAIL: past the window: $long"; exit 1; }
"$expect_error" "^kintsugi: error: --tokenizer nowhere: no such file or directory$" \
  "$kintsugi" generate --checkpoint ../run/model --tokenizer nowhere
out="$("$kintsugi" generate --checkpoint ../run/model --tokenizer nowhere 2>&1 || true)"
if grep -q fetch_data <<<"$out"; then
  echo "FAIL: advice about the demo data for the user's own path"
  exit 1
fi
# Llama 3's tokenizer encodes "你好" as 57668 53901, past the test model's 512 ids.
"$expect_error" "^kintsugi: error: the prompt as .* encodes it holds token id 57668 \\(at position 0\\), outside the model's vocabulary of 512 \\(model.vocab_size\\): generate with the tokenizer ../run/model was trained with \\(--tokenizer\\)$" \
  "$kintsugi" generate --checkpoint ../run/model --tokenizer "$tokenizer/../llama3-tokenizer" \
  --prompt "你好" --tokens 2
