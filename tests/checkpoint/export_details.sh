#!/usr/bin/env bash
# What `kintsugi export` writes besides the weights, on a tiny Llama trained on Llama 2's
# tokenizer (whose tokenizer_config.json says model_max_length 4096):
# - a training checkpoint's export carries the tokenizer of the run's <out>/model when it is the
#   one the checkpoint records, and none (said) when it is another;
# - tokenizer_config.json's model_max_length is the model's seq_len, config.json has the
#   tokenizer's bos_token_id and eos_token_id;
# - a re-export into the same folder says which files it replaces and which it removes, one line
#   each (as save_pretrained, it writes over the earlier export);
# - sharded weights under another name than model.safetensors are refused before anything is
#   written (from_pretrained looks for model.safetensors.index.json).
# Usage: export_details.sh KINTSUGI OUT_DIR DATA_DIR
set -euo pipefail
kintsugi="$1" out="$2/export_details" data="$3"
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1
rm -rf "$out" && mkdir -p "$out"
die() { echo "FAIL: $*"; exit 1; }
"$kintsugi" train --set model.preset=llama-tiny --set model.n_layer=1 --set model.d_model=32 \
  --set model.n_head=2 --set model.n_kv_head=1 --set model.d_ff=64 --set model.seq_len=16 \
  --set data.train="$data/brown/llama2/train.bin" --set data.val="$data/brown/llama2/val.bin" \
  --set data.tokenizer="$data/llama2-tokenizer" --set train.steps=2 --set train.warmup_steps=1 \
  --set train.global_batch=2 --set train.micro_batch=1 --set train.eval_batches=1 \
  --save-every 2 --out "$out/run" >"$out/train.log"
step="$out/run/checkpoints/step-00000002"

# The checkpoint's export finds the run's model/ tokenizer.
"$kintsugi" export --checkpoint "$step" --out "$out/hf/model.safetensors" | tee "$out/1.log"
grep -q "^wrote the tokenizer next to it (model_max_length 16: .*): .*run/model/tokenizer.json" "$out/1.log" \
  || die "no tokenizer from the run's model/"
python3 - "$out/hf" <<'PY'
import json, os, sys
d = sys.argv[1]
config = json.load(open(os.path.join(d, "config.json")))
tok = json.load(open(os.path.join(d, "tokenizer_config.json")))
assert tok["model_max_length"] == 16, ("model_max_length", tok["model_max_length"])
assert config["bos_token_id"] == 1 and config["eos_token_id"] == 2, config
print("config.json bos/eos", config["bos_token_id"], config["eos_token_id"],
      "model_max_length", tok["model_max_length"])
PY

# Again, sharded: the single file goes, config.json and the tokenizer are written over.
"$kintsugi" export --checkpoint "$step" --out "$out/hf/model.safetensors" --max-shard-size 500KB \
  | tee "$out/2.log"
grep -qx "removed $out/hf/model.safetensors (.*)" "$out/2.log" || die "the single file's removal is not said"
grep -qx "replaced $out/hf/config.json" "$out/2.log" || die "config.json's replacement is not said"
grep -qx "replaced $out/hf/tokenizer.json" "$out/2.log" || die "tokenizer.json's replacement is not said"
shards=$(ls "$out/hf" | grep -c '^model-[0-9]\{5\}-of-[0-9]\{5\}\.safetensors$')
((shards >= 2)) || die "$shards shards"
# Back to one file: each shard and the index is named as removed.
"$kintsugi" export --checkpoint "$step" --out "$out/hf/model.safetensors" | tee "$out/3.log"
(($(grep -c "^removed $out/hf/model-[0-9]\{5\}-of-[0-9]\{5\}\.safetensors " "$out/3.log") == shards)) \
  || die "not every shard's removal is said"
grep -q "^removed $out/hf/model.safetensors.index.json " "$out/3.log" || die "the index's removal is not said"

# Shards under a name from_pretrained does not look for: refused, nothing written.
"$here/../cli/expect_error.sh" \
  "--out .*weights.safetensors: .* sharded weights are model-0000K-of-0000N.safetensors with model.safetensors.index.json.*give --out .*/model.safetensors" \
  "$kintsugi" export --checkpoint "$step" --out "$out/named/weights.safetensors" --max-shard-size 500KB
test ! -e "$out/named" || die "the refused export wrote $(ls "$out/named")"

# model/ holding another tokenizer than the checkpoint records: none written, and why.
rm "$out/run/model/tokenizer.json" "$out/run/model/tokenizer_config.json"
cp "$data/gpt2-tokenizer/"* "$out/run/model/"
"$kintsugi" export --checkpoint "$step" --out "$out/other/model.safetensors" | tee "$out/4.log"
grep -q "^no tokenizer written: .* is not known to be its tokenizer" "$out/4.log" \
  || die "a foreign tokenizer was taken, or its refusal not said"
test ! -e "$out/other/tokenizer.json" && test ! -e "$out/other/vocab.json"
# generate on that model/ without --tokenizer names the files it took, not an empty --tokenizer.
"$here/../cli/expect_error.sh" \
  "run/model was made with the tokenizer of vocabulary 32000.* but the tokenizer files in .*run/model with vocabulary 50257" \
  "$kintsugi" generate --checkpoint "$out/run/model" --prompt a --tokens 1
