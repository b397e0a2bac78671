#!/usr/bin/env bash
# Hugging Face model folders both ways, against transformers itself (docs/checkpoints.md "A
# Hugging Face model folder"). For GPT-2, Llama (Llama 2's tokenizer, grouped-query attention),
# BLOOM, and Llama 3.1's RoPE scaling with a head size of its own (llama3), Mistral's sliding
# window and Qwen2's qkv biases with a tied head, and the mixtures of experts of
# configs/moe-tiny.toml as Mixtral and (with a shared expert, gates not renormalised) as
# Qwen2-MoE, once with dense blocks between (decoder_sparse_step 2: docs/moe.md "Dense
# blocks"): a small model trained 3 steps is exported sharded (`--max-shard-size 100KB`);
# transformers must load that index and shards and give `kintsugi eval`'s loss on the first
# validation window (bench/pytorch/transformers_load.py, relative 1e-4). Then transformers saves
# the model again with its own save_pretrained, sharded, and `kintsugi train --init-from` that
# folder (model shape from transformers' config.json, no model.* key but the context) must start
# from the trained weights (a step at a learning rate of 1e-30: check_run weights, 1e-12), on
# one rank and on 2 with --tp 2 (--dp 2 for the mixtures of experts, whose experts are not split
# over tp). One line per family; exit 1 on any difference.
#
# Usage: [TRANSFORMERS_CHECK_FAMILIES="gpt llama bloom llama3 mistral qwen2 mixtral qwen2moe qwen2moedense"] bench/transformers_folder_check.sh [KINTSUGI] [CHECK_RUN] [OUT_DIR]
# Needs: data/ from scripts/fetch_data.sh, a Python with torch and transformers ($PYTHON), mpirun.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kintsugi="${1:-$root/build/kintsugi}"
check="${2:-$root/build/tests/check_run}"
out="${3:-$(mktemp -d)}"
mkdir -p "$out"
python="${PYTHON:-python3}"
data="$root/data"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
for case in "gpt configs/gpt-tiny.toml brown gpt2-tokenizer" \
            "llama configs/llama-tiny.toml brown/llama2 llama2-tokenizer" \
            "bloom configs/bloom-tiny.toml brown gpt2-tokenizer" \
            "llama3 configs/llama3-tiny.toml brown/llama2 llama2-tokenizer" \
            "mistral configs/mistral-tiny.toml brown/llama2 llama2-tokenizer" \
            "qwen2 configs/qwen2-tiny.toml brown/llama2 llama2-tokenizer" \
            "mixtral configs/moe-tiny.toml brown/llama2 llama2-tokenizer" \
            "qwen2moe configs/moe-tiny.toml brown/llama2 llama2-tokenizer model.family=qwen2 model.moe_shared_experts=1 model.moe_router_norm_topk=false" \
            "qwen2moedense configs/moe-tiny.toml brown/llama2 llama2-tokenizer model.family=qwen2 model.moe_shared_experts=1 model.moe_router_norm_topk=false model.moe_layer_freq=2"; do
  read -r family config tokens tokenizer sets <<<"$case"
  [[ " ${TRANSFORMERS_CHECK_FAMILIES:-gpt llama bloom llama3 mistral qwen2 mixtral qwen2moe qwen2moedense} " == *" $family "* ]] || continue
  model_sets=()
  for s in ${sets:-}; do model_sets+=(--set "$s"); done
  split=(--tp 2)
  [[ "$config" != *moe* ]] || split=(--dp 2)
  run="$out/folder_$family"
  rm -rf "$run"
  common=(--config "$root/$config" --set data.train="$data/$tokens/train.bin"
          --set data.val="$data/$tokens/val.bin" --set train.global_batch=4
          --set train.micro_batch=1 --set train.eval_every=0 --set train.eval_batches=2)
  "$kintsugi" train "${common[@]}" "${model_sets[@]}" --out "$run/a" --set data.tokenizer="$data/$tokenizer" \
    --set model.n_layer=2 --set model.seq_len=64 --set train.steps=3 \
    --set train.warmup_steps=1 >"$run.train.log" 2>&1
  "$kintsugi" export --checkpoint "$run/a/model" --out "$run/ours/model.safetensors" \
    --max-shard-size 100KB >/dev/null
  ours_loss="$("$kintsugi" eval --checkpoint "$run/a/model" --data "$data/$tokens/val.bin" \
    --windows 1 --json | tail -1 | "$python" -c 'import json, sys; print(json.load(sys.stdin)["loss"])')"
  theirs="$("$python" "$root/bench/pytorch/transformers_load.py" "$run/ours" \
    "$data/$tokens/val.bin" 64 "x")"
  loss_ok="$("$python" -c 'import json,sys; t=json.loads(sys.argv[1]); o=float(sys.argv[2]); r=abs(t["loss"]-o)/abs(o); print(f"{r:.1e}", "ok" if r < 1e-4 else "DIFFERENT")' "$theirs" "$ours_loss")"
  files="$("$python" "$root/bench/pytorch/transformers_save_sharded.py" "$run/ours" "$run/theirs" 100KB)"
  start=(--set train.steps=1 --set train.lr=1e-30 --set train.min_lr=1e-30 --set train.warmup_steps=0
         --set model.seq_len=64 "${model_sets[@]}" --init-from "$run/theirs")
  weights_ok=ok
  "$kintsugi" train "${common[@]}" "${start[@]}" --out "$run/b" >"$run.b.log" 2>&1 &&
    "$check" weights "$run/a" "$run/b" 1e-12 >"$run.b.check" 2>&1 || weights_ok=DIFFERENT
  mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train "${common[@]}" "${start[@]}" \
    "${split[@]}" --out "$run/c" >"$run.c.log" 2>&1 &&
    "$check" weights "$run/a" "$run/c" 1e-12 >"$run.c.check" 2>&1 || weights_ok=DIFFERENT
  line="$family: transformers loads kintsugi's shards: loss relative ${loss_ok}; kintsugi loads transformers' save_pretrained shards ($(wc -w <<<"$files") files): weights $weights_ok (serial, ${split[*]#--})"
  echo "$line"
  [[ "$line" != *DIFFERENT* ]] || { status=1; tail -3 "$run.b.log" "$run.c.log" 2>/dev/null || true; }
done
exit $status
