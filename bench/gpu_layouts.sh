#!/usr/bin/env bash
# GPU ranks on one GPU: every parallel mode with 2 and 4 ranks sharing the machine's GPU, device
# buffers moved by MPI through page-locked host memory (NCCL refuses two ranks on one GPU). Each
# layout trains the tiny 4-layer GPT of the multi-rank CPU tests (tests/mpi_tests.cmake) from the
# same seed and data and must reproduce the single-GPU run: fp32 losses and weights within
# relative 1e-5 over 10 steps, bf16 within 1e-2; the bytes each group moved equal the theory
# (check_run comm). The single-GPU fp32 run is also held against the CPU's serial run (1e-5).
# Prints one line per layout; exit 1 on any failure.
#
# Usage: bench/gpu_layouts.sh KINTSUGI CHECK_RUN OUT_DIR
# Needs data/ (scripts/fetch_data.sh) and mpirun on PATH (a bundle's bin/ has it).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kintsugi="$1" check="$2" out="$3"
data="$root/data"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2
micro_run=(--config "$root/configs/gpt-tiny.toml"
  --set data.train="$data/brown/train.bin" --set data.val="$data/brown/val.bin"
  --set data.tokenizer="$data/gpt2-tokenizer"
  --set model.n_layer=4 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=32
  --set train.global_batch=8 --set train.micro_batch=1 --set train.steps=10
  --set train.warmup_steps=1 --set train.eval_every=0 --set train.eval_batches=3
  --set train.log_every=1 --set train.eps=1e-4 --set parallel.bucket_mib=0.5
  --set comm.timeout_s=120)
failures=0
verdict() {  # verdict NAME STATUS: one line, failure counted
  if [[ $2 -eq 0 ]]; then
    echo "PASS $1"
  else
    echo "FAIL $1 (see $out/$1.log)"
    failures=$((failures + 1))
  fi
}
single() {  # single NAME [flags...]: one process
  local name="$1"
  shift
  rm -rf "${out:?}/$name"
  timeout 300 "$kintsugi" train --out "$out/$name" "${micro_run[@]}" "$@" >"$out/$name.log" 2>&1
  verdict "$name" $?
}
layout() {  # layout REFERENCE RTOL NAME RANKS [flags...]: under mpirun, held to REFERENCE
  local reference="$1" rtol="$2" name="$3" ranks="$4"
  shift 4
  rm -rf "${out:?}/$name"
  {
    timeout 300 mpirun -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train \
      --out "$out/$name" "${micro_run[@]}" "$@" &&
      "$check" compare "$out/$reference" "$out/$name" "$rtol" &&
      "$check" comm "$out/$name"
  } >"$out/$name.log" 2>&1
  verdict "$name" $?
}

single cpu_fp32 --device cpu
single cuda_fp32 --device cuda
"$check" compare "$out/cpu_fp32" "$out/cuda_fp32" 1e-5 >"$out/cuda_fp32_vs_cpu.log" 2>&1
verdict cuda_fp32_vs_cpu $?
single cuda_bf16 --device cuda --precision bf16

for precision in fp32 bf16; do
  rtol=1e-5
  [[ $precision == bf16 ]] && rtol=1e-2
  reference="cuda_$precision"
  layout "$reference" "$rtol" "dp2_$precision" 2 --device cuda --precision "$precision" --dp 2
  layout "$reference" "$rtol" "tp2_sp_$precision" 2 --device cuda --precision "$precision" \
    --tp 2 --sequence-parallel
  layout "$reference" "$rtol" "pp2_1f1b_$precision" 2 --device cuda --precision "$precision" \
    --pp 2 --schedule 1f1b
  layout "$reference" "$rtol" "tp2_dp2_zero3_$precision" 4 --device cuda \
    --precision "$precision" --tp 2 --dp 2 --zero 3
  layout "$reference" "$rtol" "tp2_pp2_sp_$precision" 4 --device cuda \
    --precision "$precision" --tp 2 --pp 2 --sequence-parallel
done
echo "gpu_layouts: $failures failed"
[[ $failures -eq 0 ]]
