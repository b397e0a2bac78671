#!/usr/bin/env bash
# 3D tensor parallelism beyond CTest's representative grids (tests/mpi_grid_tests.cmake): every
# grid of 8 ranks (2x2x2, and 1x2x2, 2x1x2, 2x2x1 x dp 2, 2x2x1 and 1x2x2 x pp 2) and 1D tensor
# parallelism x dp 2 and x pp 2 over the same ranks, on the tiny 4-layer GPT of the multi-rank
# tests, each against the serial run with the same micro-batch: losses and weights within
# relative 1e-5 (check_run compare), bytes equal to plan/comm_volume.hpp (check_run comm). Prints
# one line per layout with its median step time next to the 1D layout of the same rank count
# (docs/parallelism.md, 3D tensor parallelism). The tiny model says nothing about speed at
# scale: its times only show that nothing is pathologically slow.
#
# Usage: bench/tensor_grid_layouts.sh KINTSUGI CHECK_RUN OUT_DIR [FAMILY_CONFIG]
# FAMILY_CONFIG: configs/gpt-tiny.toml (default), configs/llama-tiny.toml or bloom-tiny.toml.
# Needs data/ (scripts/fetch_data.sh) and mpirun; 8 ranks on 2 cores take a few minutes.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kintsugi="$1" check="$2" out="$3" config="${4:-$root/configs/gpt-tiny.toml}"
data="$root/data"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tokens=(--set data.train="$data/brown/train.bin" --set data.val="$data/brown/val.bin"
  --set data.tokenizer="$data/gpt2-tokenizer")
case "$config" in
  *llama*) tokens=(--set data.train="$data/brown/llama2/train.bin"
             --set data.val="$data/brown/llama2/val.bin" --set data.tokenizer="$data/llama2-tokenizer")
           shape=(--set model.d_ff=176) ;;
  *bloom*) shape=(--set model.d_ff=256) ;;
  *) shape=() ;;
esac
run=(--config "$config" "${tokens[@]}" --set model.n_layer=4 --set model.d_model=64
  --set model.n_head=4 "${shape[@]}" --set model.seq_len=32 --set train.global_batch=16
  --set train.micro_batch=2 --set train.steps=15 --set train.warmup_steps=1
  --set train.eval_every=0 --set train.eval_batches=2 --set train.log_every=1
  --set train.eps=1e-4 --set parallel.bucket_mib=0.5)
"$kintsugi" train "${run[@]}" --out "$out/serial" --overwrite > "$out/serial.log" 2>&1 ||
  { echo "serial run failed: $out/serial.log"; exit 1; }
median_ms() {  # the median step time of a run's metrics.jsonl
  python3 -c 'import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%.0f" % statistics.median(r["step_ms"] for r in rows if "step_ms" in r))' "$1/metrics.jsonl"
}
failures=0
layout() {  # NAME RANKS flags...
  local name="$1" ranks="$2"
  shift 2
  if ! mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "${run[@]}" "$@" \
      --out "$out/$name" > "$out/$name.log" 2>&1; then
    echo "$name: failed ($out/$name.log)"
    failures=$((failures + 1))
    return
  fi
  local verdict="ok"
  "$check" compare "$out/serial" "$out/$name" 1e-5 1e-5 > "$out/$name.compare" || verdict="DIFFERS"
  "$check" comm "$out/$name" > "$out/$name.comm" || verdict="$verdict, BYTES DIFFER"
  [[ "$verdict" == ok ]] || failures=$((failures + 1))
  printf '%-22s %d ranks  %6s ms/step  %s (%s)\n' "$name" "$ranks" "$(median_ms "$out/$name")" \
    "$verdict" "$(tail -1 "$out/$name.compare")"
}
# 1D over 4 ranks (the model's 4 heads allow no more) x dp 2 against grids of 8 ranks.
layout tp4_dp2 8 --tp 4 --dp 2
layout grid_2x2x2 8 --tensor-grid 2,2,2
for grid in 1,2,2 2,1,2 2,2,1; do
  layout "grid_${grid//,/x}_dp2" 8 --tensor-grid "$grid" --dp 2
done
layout tp4_pp2 8 --tp 4 --pp 2
layout grid_2x2x1_pp2 8 --tensor-grid 2,2,1 --pp 2
layout grid_1x2x2_pp2 8 --tensor-grid 1,2,2 --pp 2
((failures == 0)) || { echo "$failures layout(s) failed"; exit 1; }
