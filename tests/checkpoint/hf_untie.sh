#!/usr/bin/env bash
# --init-from a tied Hugging Face folder with model.tie_embeddings = "untied" (docs/checkpoints.md;
# train/hf_init.cpp): the run gets its own head, which starts as a copy of the embedding.
#   - the note says so, and the run's model records an untied head;
#   - the first step's loss is the tied run's, bit for bit (the same logits); the second is not
#     (the head's gradient no longer reaches the embedding);
#   - exported, the folder is untied (tie_word_embeddings false, an lm_head.weight; the tied
#     run's export has neither): at a learning rate of 1e-30 its lm_head.weight is the
#     embedding (within 1e-20: a step of 1e-30 moves only the folder's zeros), after training
#     at 1e-2 it differs from the embedding by more than 1e-3.
# Usage: hf_untie.sh KINTSUGI OUT_DIR DATA_DIR NAME FAMILY DTYPE
set -euo pipefail
kintsugi="$1" out="$2" data="$3" name="$4" family="$5" dtype="$6"
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir" && mkdir -p "$dir/folder"
python3 "$here/make_hf_folder.py" "$dir/folder" "$dir/single.safetensors" "$family" 1 "$dtype" tied
cp "$data/gpt2-512-tokenizer/"* "$dir/folder/"
# Three steps at 1e-2 (constant), on the test corpus.
run=(--set data.train="$data/brown/gpt2-512/train.bin" --set data.val="$data/brown/gpt2-512/val.bin"
     --set train.steps=3 --set train.global_batch=4 --set train.micro_batch=1 --set train.lr=1e-2
     --set train.min_lr=1e-2 --set train.warmup_steps=0 --set train.eval_every=0
     --set train.eval_batches=1)
untie=(--set model.tie_embeddings=untied)
"$kintsugi" train "${run[@]}" --init-from "$dir/folder" --out "$dir/tied" >/dev/null
"$kintsugi" train "${run[@]}" --init-from "$dir/folder" "${untie[@]}" \
  --out "$dir/untied" 2>&1 | tee "$dir/untied.log" >/dev/null
grep -q "^note: .*config.json ties the LM head to the token embedding; model.tie_embeddings = \"untied\" gives the run its own head, which starts as a copy of the embedding$" \
  "$dir/untied.log" || { echo "FAIL: the note"; exit 1; }
"$kintsugi" train "${run[@]}" --init-from "$dir/folder" "${untie[@]}" \
  --set train.lr=1e-30 --set train.min_lr=1e-30 --set train.steps=1 --out "$dir/still" >/dev/null
for run in tied untied still; do
  "$kintsugi" export --checkpoint "$dir/$run/model" --out "$dir/$run/hf/model.safetensors" >/dev/null
done

python3 - "$dir" <<'PY'
import array, json, os, struct, sys
d = sys.argv[1]

def losses(run):
    return [m["loss"] for m in map(json.loads, open(os.path.join(d, run, "metrics.jsonl")))
            if "lr" in m]

def tensors(run):
    raw = open(os.path.join(d, run, "hf", "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            assert v["dtype"] == "F32", (k, v["dtype"])
            out[k] = array.array("f", raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
    return out

def tie(run):
    return json.load(open(os.path.join(d, run, "model", "manifest.json")))["model"].get("tie_embeddings", "family")

tied, untied = losses("tied"), losses("untied")
print("tied losses:  ", tied)
print("untied losses:", untied)
assert len(tied) == 3 and len(untied) == 3, (tied, untied)
assert untied[0] == tied[0], "the first step's loss differs from the tied run's"
assert untied[1] != tied[1], "the second step's loss is the tied run's: the head is still tied"
assert tie("tied") == "tied" and tie("untied") == "untied" and tie("still") == "untied", \
    (tie("tied"), tie("untied"), tie("still"))
def tied_word_embeddings(run):
    return json.load(open(os.path.join(d, run, "hf", "config.json")))["tie_word_embeddings"]

assert tied_word_embeddings("tied") and "lm_head.weight" not in tensors("tied"), \
    "the tied run's export has a head of its own"
for run, same in (("still", True), ("untied", False)):
    t = tensors(run)
    assert not tied_word_embeddings(run), f"{run}: config.json ties the head"
    head, embedding = t["lm_head.weight"], t["model.embed_tokens.weight"]
    assert len(head) == len(embedding)
    apart = max(abs(a - b) for a, b in zip(head, embedding))
    print(f"{run}: max |lm_head.weight - embed_tokens.weight| = {apart:g}")
    # At 1e-30 a step moves a weight by about 1e-30: only the folder's zeros change.
    assert (apart < 1e-20) == same, f"{run}: lm_head.weight {'differs from' if same else 'is'} the embedding"
    assert same or apart > 1e-3, f"{run}: the head hardly trained"

PY
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
