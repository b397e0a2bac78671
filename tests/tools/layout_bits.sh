#!/usr/bin/env bash
# The same bits before and after a refactoring of the engine (docs/architecture.md, "Changing
# the engine without changing the math"): records the metrics of a fixed set of tiny runs, one
# per layout family, and compares two such records step by step, every loss, validation loss
# and gradient norm equal to the last bit.
#
#   layout_bits.sh record KINTSUGI DATA_DIR OUT_DIR   runs the set with this build's program
#   layout_bits.sh compare BEFORE_DIR AFTER_DIR       exits 1 on a difference (runs BEFORE
#                                                     has no record of are named, not compared)
#
# DATA_DIR is the repository's data/ after scripts/fetch_data.sh (the 512-id test tokenizer and
# the Brown corpus in it). The runs: serial; dp 2 with ZeRO-1; tp 2 with sequence parallelism;
# pp 2 interleaved (2 virtual stages); tp 2 x pp 2 x dp 2; the 2x2x1 and 1x2x2 tensor grids;
# the Llama, BLOOM, Qwen2 (qkv biases, tied head) and Qwen3 (q_norm and k_norm, whose gradients
# are summed over the tensor-parallel ranks) families serial and at tp 2; Llama on the
# 2x1x2 grid (SwiGLU's layers linked for overlap) and BLOOM on the 1x2x1 grid (each y rank's
# ALiBi slopes); full and selective recomputation with sequence parallelism; bf16 mixed
# precision; Llama with context parallelism 2 x dp 2 and ZeRO-1, and cp 2 with the ring
# exchange (two sequences per micro-batch). One compute thread per rank: the same program and layout then always gives the
# same bits on one machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# name | ranks | config | flags
runs() {
  cat <<'RUNS'
serial|1|gpt-tiny|
dp2_zero1|2|gpt-tiny|--dp 2 --zero 1
tp2_sp|2|gpt-tiny|--tp 2 --sequence-parallel
pp2_interleaved|2|gpt-tiny|--pp 2 --schedule interleaved --virtual-stages 2
tp2_pp2_dp2|8|gpt-tiny|--tp 2 --pp 2 --dp 2 --schedule 1f1b
grid_2x2x1|4|gpt-tiny|--tensor-grid 2,2,1
grid_1x2x2|4|gpt-tiny|--tensor-grid 1,2,2 --set train.micro_batch=2
llama_serial|1|llama-tiny|
llama_tp2|2|llama-tiny|--tp 2
bloom_serial|1|bloom-tiny|
bloom_tp2|2|bloom-tiny|--tp 2
qwen2_serial|1|qwen2-tiny|
qwen2_tp2|2|qwen2-tiny|--tp 2
qwen3_serial|1|qwen3-tiny|
qwen3_tp2|2|qwen3-tiny|--tp 2
llama_grid_2x1x2|4|llama-tiny|--tensor-grid 2,1,2 --set train.micro_batch=2
bloom_grid_1x2x1|2|bloom-tiny|--tensor-grid 1,2,1
tp2_sp_recompute_full|2|gpt-tiny|--tp 2 --sequence-parallel --recompute full
llama_tp2_sp_selective|2|llama-tiny|--tp 2 --sequence-parallel --recompute selective
bf16_serial|1|gpt-tiny|--precision bf16
llama_cp2_dp2_zero1|4|llama-tiny|--cp 2 --dp 2 --zero 1
llama_cp2_ring|2|llama-tiny|--cp 2 --cp-comm ring --set train.micro_batch=2
RUNS
}

record() {
  local kintsugi="$1" data="$2" out="$3" name ranks config flags
  mkdir -p "$out"
  while IFS='|' read -r name ranks config flags; do
    # shellcheck disable=SC2206
    local args=(train --config "$here/configs/$config.toml"
      --set data.train="$data/brown/gpt2-512/train.bin" --set data.val="$data/brown/gpt2-512/val.bin"
      --set data.tokenizer="$data/gpt2-512-tokenizer" --set model.vocab_size=512
      --set model.n_layer=4 --set model.seq_len=32
      --set train.global_batch=8 --set train.micro_batch=1 --set train.steps=6
      --set train.warmup_steps=1 --set train.eval_every=3 --set train.eval_batches=2
      --set train.log_every=1 --out "$out/$name" --overwrite $flags)
    if ((ranks == 1)); then
      "$kintsugi" "${args[@]}" </dev/null >"$out/$name.log" 2>&1
    else
      mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" "${args[@]}" \
        </dev/null >"$out/$name.log" 2>&1
    fi || { cat "$out/$name.log"; echo "layout_bits: run $name failed" >&2; exit 1; }
    echo "recorded $name"
  done < <(runs)
}

# The step records' numbers that the math decides (not times, rates or memory).
numbers() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r.get("step"), *(repr(r.get(k)) for k in ("loss", "val_loss", "grad_norm", "lr")))
' "$1"
}

compare() {
  local before="$1" after="$2" name rest bad=0
  while IFS='|' read -r name rest; do
    # A run added to the list after BEFORE was recorded: nothing to compare it with.
    if [[ ! -d "$before/$name" ]]; then
      echo "new run: $name (BEFORE has no record of it)"
      continue
    fi
    if ! diff <(numbers "$before/$name/metrics.jsonl") <(numbers "$after/$name/metrics.jsonl") \
      >"$after/$name.diff"; then
      echo "DIFFERENT: $name (step loss val_loss grad_norm lr; < before, > after):"
      head -6 "$after/$name.diff"
      bad=1
    else
      echo "same bits: $name ($(grep -c '"loss":' "$after/$name/metrics.jsonl") steps)"
    fi
  done < <(runs)
  return $bad
}

case "${1:-}" in
  record) (($# == 4)) || { echo "usage: layout_bits.sh record KINTSUGI DATA_DIR OUT_DIR" >&2; exit 2; }
          record "$2" "$3" "$4" ;;
  compare) (($# == 3)) || { echo "usage: layout_bits.sh compare BEFORE_DIR AFTER_DIR" >&2; exit 2; }
           compare "$2" "$3" ;;
  *) echo "usage: layout_bits.sh record KINTSUGI DATA_DIR OUT_DIR | compare BEFORE_DIR AFTER_DIR" >&2
     exit 2 ;;
esac
