#!/usr/bin/env bash
# Do Hugging Face transformers' own AutoTokenizer and AutoModelForCausalLM load what
# `kintsugi export` writes, and compute what kintsugi computes? For GPT-2, Llama (Llama 2's
# tokenizer) and BLOOM: a small model trained 3 steps on Brown, exported with its tokenizer;
# then bench/pytorch/transformers_load.py loads the folder and must give the ids of
# `kintsugi encode` for a sample text and, on the first validation window, the loss of
# `kintsugi eval` (relative 1e-4). Prints one line per family; exit 1 on any difference.
#
# Usage: [TRANSFORMERS_CHECK_FAMILIES="gpt llama bloom"] bench/transformers_check.sh [KINTSUGI] [OUT_DIR]
# Needs: data/ from scripts/fetch_data.sh, a Python with torch and transformers ($PYTHON).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kintsugi="${1:-$root/build/kintsugi}"
out="${2:-$(mktemp -d)}"
mkdir -p "$out"
python="${PYTHON:-python3}"
data="$root/data"
text='The jury said 12,345 naïve cafés   open at 9:30 — 東京 😀 "quoted" end.'
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
status=0
for case in "gpt configs/gpt-tiny.toml brown gpt2-tokenizer" \
            "llama configs/llama-tiny.toml brown/llama2 llama2-tokenizer" \
            "bloom configs/bloom-tiny.toml brown gpt2-tokenizer"; do
  read -r family config tokens tokenizer <<<"$case"
  [[ " ${TRANSFORMERS_CHECK_FAMILIES:-gpt llama bloom} " == *" $family "* ]] || continue
  run="$out/$family"
  rm -rf "$run"
  "$kintsugi" train --config "$root/$config" --out "$run" \
    --set data.train="$data/$tokens/train.bin" --set data.val="$data/$tokens/val.bin" \
    --set data.tokenizer="$data/$tokenizer" --set model.n_layer=2 --set model.seq_len=64 \
    --set train.steps=3 --set train.global_batch=4 --set train.micro_batch=2 \
    --set train.warmup_steps=1 --set train.eval_every=0 >"$run.train.log" 2>&1
  "$kintsugi" export --checkpoint "$run/model" --out "$run/hf/model.safetensors" >/dev/null
  ours_ids="$(printf '%s' "$text" | "$kintsugi" encode --tokenizer "$data/$tokenizer")"
  ours_loss="$("$kintsugi" eval --checkpoint "$run/model" --data "$data/$tokens/val.bin" \
    --windows 1 --json | tail -1 | "$python" -c 'import json, sys; print(json.load(sys.stdin)["loss"])')"
  theirs="$("$python" "$root/bench/pytorch/transformers_load.py" "$run/hf" \
    "$data/$tokens/val.bin" 64 "$text")"
  verdict="$("$python" - "$ours_ids" "$ours_loss" "$theirs" <<'EOF'
import json, sys
ours_ids = [int(t) for t in sys.argv[1].split()]
ours_loss = float(sys.argv[2])
theirs = json.loads(sys.argv[3])
same_ids = ours_ids == theirs["ids"]
rel = abs(theirs["loss"] - ours_loss) / abs(ours_loss)
ok = same_ids and rel < 1e-4
print(f"{'ok' if ok else 'DIFFERENT'}: {theirs['architecture']} + {theirs['tokenizer']}: "
      f"ids {'identical' if same_ids else 'differ'} ({len(ours_ids)}), loss kintsugi "
      f"{ours_loss:.6f} transformers {theirs['loss']:.6f} (relative {rel:.1e})")
if not same_ids:
    file_ids = theirs.get("file_ids")
    print(f"  kintsugi     {ours_ids}\n  AutoTokenizer {theirs['ids']} {theirs.get('tokens')}\n"
          f"  tokenizers on the file alone: {file_ids} "
          f"({'equal to kintsugi' if file_ids == ours_ids else 'different from kintsugi'})")
EOF
)"
  echo "$family: $verdict"
  printf '%s\n' "$theirs" >"$run.transformers.json"
  [[ "$verdict" == ok:* ]] || status=1
done
exit $status
