#!/usr/bin/env bash
# A damaged or unsupported Hugging Face folder is refused before any weight is set: one line
# naming the file and the problem (the field, the shard, the tensor), exit status 1.
# Usage: [RANKS=n] hf_folder_refused.sh KIND PATTERN KINTSUGI OUT_DIR DATA_DIR [flags...]
set -euo pipefail
kind="$1" pattern="$2" kintsugi="$3" out="$4" data="$5"
shift 5
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/hf_refused_$kind${RANKS:+_ranks$RANKS}"
rm -rf "$dir" && mkdir -p "$dir/folder"
python3 "$here/make_hf_folder.py" "$dir/folder" "$dir/single.safetensors" llama 3 bf16 gqa
cp "$data/gpt2-512-tokenizer/"* "$dir/folder/"
f="$dir/folder"
edit_json() {  # FILE PYTHON-STATEMENT on `j`
  python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); $2; json.dump(j, open(p, 'w'))" "$1"
}
case "$kind" in
  missing_shard) rm "$f/model-00002-of-00003.safetensors" ;;
  truncated_shard) truncate -s -100 "$f/model-00003-of-00003.safetensors" ;;
  index_names_missing_tensor)
    edit_json "$f/model.safetensors.index.json" \
      "j['weight_map']['model.layers.0.mlp.up_proj.bias'] = 'model-00002-of-00003.safetensors'" ;;
  index_omits_tensor)
    edit_json "$f/model.safetensors.index.json" "del j['weight_map']['model.norm.weight']" ;;
  shape_mismatch) edit_json "$f/config.json" "j['intermediate_size'] = 48" ;;
  rope_scaling) edit_json "$f/config.json" "j['rope_scaling'] = {'type': 'dynamic', 'factor': 2.0}" ;;
  activation) edit_json "$f/config.json" "j['hidden_act'] = 'gelu'" ;;
  attention_bias) edit_json "$f/config.json" "j['attention_bias'] = True" ;;
  unknown_field) edit_json "$f/config.json" "j['sliding_window'] = 4096" ;;
  other_family) edit_json "$f/config.json" "j['model_type'] = 'gemma2'" ;;
  zero_rms_norm_eps) edit_json "$f/config.json" "j['rms_norm_eps'] = 0" ;;
  layers_disagree) edit_json "$f/config.json" "j['num_hidden_layers'] = 1000000000" ;;
  contradicts_config) ;;  # the flags give another model.d_ff
  sentencepiece_only) rm "$f/encoder.json" "$f/vocab.bpe" && echo "not read" >"$f/tokenizer.model" ;;
  tokenizer_past_vocabulary)  # the 512-id tokenizer as a tokenizer.json with a 513th id
    python3 -c "
import json, sys
f = sys.argv[1]
merges = [l for l in open(f + '/vocab.bpe').read().split('\n')[1:] if l]
json.dump({'added_tokens': [{'id': 512, 'content': '<|extra|>', 'special': True}],
           'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False},
           'decoder': {'type': 'ByteLevel'},
           'model': {'type': 'BPE', 'vocab': json.load(open(f + '/encoder.json')), 'merges': merges}},
          open(f + '/tokenizer.json', 'w'))" "$f"
    rm "$f/encoder.json" "$f/vocab.bpe" ;;
  *) echo "unknown kind $kind" && exit 2 ;;
esac
cat >"$dir/run.toml" <<TOML
[data]
train = "$data/brown/gpt2-512/train.bin"
val = "$data/brown/gpt2-512/val.bin"
[train]
steps = 1
global_batch = 8
micro_batch = 1
TOML
run=("$kintsugi" train --config "$dir/run.toml" --init-from "$f" --out "$dir/run" "$@")
if [[ -n "${RANKS:-}" ]]; then run=(mpirun -q -np "$RANKS" --oversubscribe --bind-to none "${run[@]}"); fi
set +e
"$here/../cli/expect_error.sh" "$pattern" "${run[@]}"
status=$?
set -e
((status == 0))
# Nothing was trained or saved.
test ! -e "$dir/run/model"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
