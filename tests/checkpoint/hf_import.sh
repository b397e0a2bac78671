#!/usr/bin/env bash
# A Hugging Face folder used without training (docs/checkpoints.md, "Importing a folder without
# training"), on a hand-made folder (make_hf_folder.py, the test tokenizer next to it):
#   - `import` writes a kintsugi model directory with the tokenizer, and `export` of it gives back
#     every tensor of the folder, bit for bit (same name, type, shape and bytes; a tied Llama's
#     head comes back as lm_head, the embedding's copy);
#   - `generate --init-from FOLDER` prints the same text as `generate --checkpoint` of the
#     import, greedy and sampled with a seed, and the same again when repeated; `--seq-len`
#     runs a shorter window than the folder's context and is refused outside 1 to it;
#   - an existing --out is replaced only with --overwrite, a directory that is not a model never;
#     a damaged folder is refused in one line and leaves nothing behind.
# Usage: hf_import.sh KINTSUGI OUT_DIR DATA_DIR NAME FAMILY SHARDS DTYPE [gqa] [tied] [noprefix]
set -euo pipefail
kintsugi="$1" out="$2" data="$3" name="$4" family="$5" shards="$6" dtype="$7"
shift 7
here="$(cd "$(dirname "$0")" && pwd)"
expect_error="$here/../cli/expect_error.sh"
export OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir" && mkdir -p "$dir/folder"
python3 "$here/make_hf_folder.py" "$dir/folder" "$dir/single.safetensors" "$family" "$shards" \
  "$dtype" "$@"
cp "$data/gpt2-512-tokenizer/"* "$dir/folder/"

"$kintsugi" import --from "$dir/folder" --out "$dir/model" | tee "$dir/import.log"
grep -q "^wrote $dir/model ($family model, 2 layers, d 32, $dtype weights) from $dir/folder, with its tokenizer" \
  "$dir/import.log" || { echo "FAIL: import's line"; exit 1; }
test -f "$dir/model/manifest.json" && test -f "$dir/model/vocab.json"
"$kintsugi" export --checkpoint "$dir/model" --out "$dir/back/model.safetensors" >/dev/null
python3 "$here/same_hf_tensors.py" "$dir/folder" "$dir/back"

# generate from the folder: the import's text, greedy and sampled, and the same when repeated.
for sampling in "--temperature 0" "--temperature 1 --top-k 0 --seed 3"; do
  a="$("$kintsugi" generate --init-from "$dir/folder" --prompt "The jury" --tokens 8 $sampling)"
  b="$("$kintsugi" generate --checkpoint "$dir/model" --prompt "The jury" --tokens 8 $sampling)"
  c="$("$kintsugi" generate --init-from "$dir/folder" --prompt "The jury" --tokens 8 $sampling)"
  echo "folder: $a"
  echo "model/: $b"
  [[ "$a" == "The jury"?* && "$a" == "$b" && "$a" == "$c" ]] ||
    { echo "FAIL: generate --init-from ($sampling)"; exit 1; }
done

# --seq-len: a window shorter than the folder's context (max_position_embeddings 64). Greedy,
# with 40 tokens past an 18-token window: the window restarts from its last half, so the text
# differs from the whole context's, and the key/value cache gives the text of rerunning the
# window as long as the context fits it (the first 8 tokens here). Out of range: one line.
w18="$("$kintsugi" generate --init-from "$dir/folder" --prompt "The jury" --tokens 40 --temperature 0 --seq-len 18)"
w18_nocache="$("$kintsugi" generate --init-from "$dir/folder" --prompt "The jury" --tokens 40 --temperature 0 --seq-len 18 --no-kv-cache)"
whole="$("$kintsugi" generate --init-from "$dir/folder" --prompt "The jury" --tokens 40 --temperature 0)"
whole64="$("$kintsugi" generate --init-from "$dir/folder" --prompt "The jury" --tokens 40 --temperature 0 --seq-len 64)"
short="$("$kintsugi" generate --init-from "$dir/folder" --prompt "The jury" --tokens 8 --temperature 0 --seq-len 18)"
echo "--seq-len 18: $w18"
echo "whole:        $whole"
[[ "$whole64" == "$whole" ]] || { echo "FAIL: --seq-len 64 (the whole context) differs from the default"; exit 1; }
[[ "$w18" != "$whole" ]] || { echo "FAIL: --seq-len 18 gave the whole context's text"; exit 1; }
[[ "$w18" == "$short"* && "$whole" == "$short"* ]] ||
  { echo "FAIL: --seq-len 18 changed the text while the context fits the window"; exit 1; }
[[ "$w18_nocache" == "$short"* ]] || { echo "FAIL: --seq-len 18 --no-kv-cache"; exit 1; }
for bad in 0 -3 65; do
  "$expect_error" "^kintsugi: error: --seq-len $bad is out of range: give 1 to 64, the context of .*/folder \(its model.seq_len\)$" \
    "$kintsugi" generate --init-from "$dir/folder" --seq-len "$bad"
done
"$expect_error" "^kintsugi: error: --seq-len 65 is out of range: give 1 to 64, the context of .*/model \(its model.seq_len\)$" \
  "$kintsugi" generate --checkpoint "$dir/model" --seq-len 65

# --out: replaced only with --overwrite; never a directory that is not a model.
"$expect_error" "^kintsugi: error: --out .*/model holds a model already: pass --overwrite to replace it, or choose another --out$" \
  "$kintsugi" import --from "$dir/folder" --out "$dir/model"
"$kintsugi" import --from "$dir/folder" --out "$dir/model" --overwrite | grep -q "(replaced the model that was there)$"
"$expect_error" "^kintsugi: error: --out .*/folder exists and is not a kintsugi model directory: choose another --out$" \
  "$kintsugi" import --from "$dir/folder" --out "$dir/folder" --overwrite
"$expect_error" "^kintsugi: error: --from .*/model is a kintsugi checkpoint already" \
  "$kintsugi" import --from "$dir/model" --out "$dir/again"
# A damaged folder: one line, and neither --out nor a temporary directory beside it.
cp -r "$dir/folder" "$dir/damaged"
python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); j['hidden_act' if 'hidden_size' in j else 'activation_function'] = 'relu'; json.dump(j, open(p, 'w'))" \
  "$dir/damaged/config.json"
"$expect_error" "^kintsugi: error: .*damaged/config.json: .* = \"relu\" is not supported" \
  "$kintsugi" import --from "$dir/damaged" --out "$dir/refused"
"$expect_error" "^kintsugi: error: .*damaged/config.json: .* = \"relu\" is not supported" \
  "$kintsugi" generate --init-from "$dir/damaged"
test -z "$(ls "$dir" | grep '^refused' || true)" || { echo "FAIL: a refused import left files"; exit 1; }
"$expect_error" "^kintsugi: error: --init-from .*config.json is a file: give the Hugging Face model folder that holds it" \
  "$kintsugi" generate --init-from "$dir/folder/config.json"
"$expect_error" "^kintsugi: error: generate needs either --checkpoint DIR .* or --init-from FOLDER" \
  "$kintsugi" generate --init-from "$dir/folder" --checkpoint "$dir/model"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
