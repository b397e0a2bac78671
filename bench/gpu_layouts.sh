#!/usr/bin/env bash
# GPU ranks on one GPU: every parallel mode with 2 and 4 ranks sharing the machine's GPU, device
# buffers moved by MPI through page-locked host memory (NCCL refuses two ranks on one GPU). Each
# layout trains the tiny 4-layer GPT of the multi-rank CPU tests (tests/mpi_tests.cmake) from the
# same seed and data and must reproduce the single-GPU run over 10 steps: fp32 losses and
# weights within relative 1e-5; bf16 losses within 1e-4 and weights within 0.2 of their scale,
# twice the bar of the CPU's mixed-precision layout tests (tests/mpi_tests.cmake: a master weight whose
# last f32 bits differ between two summation orders can round to a neighbouring bf16 value, and
# Adam turns that into lr-sized differences where gradients are noise). The bytes each group
# moved equal the theory (check_run comm). The single-GPU fp32 run is also held against the
# CPU's serial run: losses within 1e-5, weights within 1e-4 (the devices sum in different
# orders, and Adam amplifies the last bits of near-zero gradients as above).
# 3D tensor parallelism (docs/parallelism.md) on 4 ranks: grids 2x2x1, 2x1x2 and 1x2x2 (every
# grid collective; z = 2 splits each micro-batch's 2 sequences, so those are held to the
# single-GPU run with micro-batches of 2) and 2x1x1 x dp 2, at the same bars, and 1x2x2 with
# parallel.tensor_grid_overlap = false equal to the overlapped run bit for bit.
# Prints one line per layout; exit 1 on any failure.
#
# On a machine with a GPU per rank, GPU_LAYOUTS_BACKEND=nccl runs the layouts over NCCL (default
# auto: NCCL where every rank has its own GPU, else MPI staged through host memory).
# GPU_LAYOUTS_PRECISIONS="bf16" runs the layouts of one precision only (default "fp32 bf16");
# GPU_LAYOUTS_SETS="grid" only the grids, "1d" only the other layouts and the killed rank
# (default "1d grid").
# GPU_LAYOUTS_DEVICE=cpu runs the very same commands on the CPU, a check of this script where no
# GPU is (with GPU_LAYOUTS_NCCL=0).
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
backend=(--set comm.backend="${GPU_LAYOUTS_BACKEND:-auto}")
device="${GPU_LAYOUTS_DEVICE:-cuda}"
sets=" ${GPU_LAYOUTS_SETS:-1d grid} "
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
layout() {  # layout REFERENCE RTOL WEIGHT_RTOL NAME RANKS [flags...]: held to REFERENCE
  local reference="$1" rtol="$2" weight_rtol="$3" name="$4" ranks="$5"
  shift 5
  rm -rf "${out:?}/$name"
  {
    timeout 300 mpirun -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train \
      --out "$out/$name" "${micro_run[@]}" "${backend[@]}" "$@" &&
      "$check" compare "$out/$reference" "$out/$name" "$rtol" "$weight_rtol" &&
      "$check" comm "$out/$name"
  } >"$out/$name.log" 2>&1
  verdict "$name" $?
}

single cpu_fp32 --device cpu
single cuda_fp32 --device "$device"
"$check" compare "$out/cpu_fp32" "$out/cuda_fp32" 1e-5 1e-4 >"$out/cuda_fp32_vs_cpu.log" 2>&1
verdict cuda_fp32_vs_cpu $?
single cuda_bf16 --device "$device" --precision bf16

for precision in ${GPU_LAYOUTS_PRECISIONS:-fp32 bf16}; do
  tol=(1e-5 1e-5)
  # bf16 weights: 0.2, not the CPU's 0.1. The tensor-core attention rounds the probabilities and
  # their gradients to bf16 (as FlashAttention does), so a layout that changes the qkv GEMM's
  # shape (tp) flips more of their bits; on an H200 the worst tensor was attn.proj.bias, max
  # 1.6e-2 (about ten Adam steps), 0.116 off, while the losses stayed within 1.3e-5.
  [[ $precision == bf16 ]] && tol=(1e-4 0.2)
  held=("cuda_$precision" "${tol[@]}")
  run=(--device "$device" --precision "$precision")
  if [[ $sets == *" 1d "* ]]; then
    layout "${held[@]}" "dp2_$precision" 2 "${run[@]}" --dp 2
    layout "${held[@]}" "tp2_sp_$precision" 2 "${run[@]}" --tp 2 --sequence-parallel
    layout "${held[@]}" "pp2_1f1b_$precision" 2 "${run[@]}" --pp 2 --schedule 1f1b
    layout "${held[@]}" "tp2_dp2_zero3_$precision" 4 "${run[@]}" --tp 2 --dp 2 --zero 3
    layout "${held[@]}" "tp2_pp2_sp_$precision" 4 "${run[@]}" --tp 2 --pp 2 --sequence-parallel
    # Context parallelism: every sequence split over 2 ranks, heads exchanged around attention.
    layout "${held[@]}" "cp2_$precision" 2 "${run[@]}" --cp 2
    layout "${held[@]}" "cp2_tp2_sp_$precision" 4 "${run[@]}" --cp 2 --tp 2 --sequence-parallel
  fi
  if [[ $sets == *" grid "* ]]; then
    # A grid with z = 2 runs one of each micro-batch's two sequences per z rank.
    mb2=(--set train.micro_batch=2)
    single "cuda_${precision}_mb2" "${run[@]}" "${mb2[@]}"
    held_mb2=("cuda_${precision}_mb2" "${tol[@]}")
    layout "${held[@]}" "grid_2x2x1_$precision" 4 "${run[@]}" --tensor-grid 2,2,1
    layout "${held_mb2[@]}" "grid_2x1x2_$precision" 4 "${run[@]}" --tensor-grid 2,1,2 "${mb2[@]}"
    layout "${held_mb2[@]}" "grid_1x2x2_$precision" 4 "${run[@]}" --tensor-grid 1,2,2 "${mb2[@]}"
    layout "${held[@]}" "grid_2x1x1_dp2_$precision" 4 "${run[@]}" --tensor-grid 2,1,1 --dp 2
    # Overlap moves the same bytes in the same order on each group: the same bits without it.
    layout "grid_1x2x2_$precision" 0 0 "grid_1x2x2_blocking_$precision" 4 "${run[@]}" \
      --tensor-grid 1,2,2 "${mb2[@]}" --set parallel.tensor_grid_overlap=false
  fi
done

# NCCL where this machine allows it: a world of one rank (NCCL refuses two ranks on one GPU).
# GPU_LAYOUTS_NCCL=0 skips it for a build without NCCL.
if [[ ${GPU_LAYOUTS_NCCL:-1} != 0 ]]; then
  layout cuda_fp32 1e-5 1e-5 nccl_world_of_one 1 --device cuda --set comm.backend=nccl
fi

# A rank that dies at step 2 (kintsugi's test hook KINTSUGI_TEST_KILL_RANK) takes the GPU job
# down, with a message, in bounded time (with the 1D layouts).
if [[ $sets == *" 1d "* ]]; then
  rm -rf "${out:?}/killed"
  start=$SECONDS
  KINTSUGI_TEST_KILL_RANK=1:2 timeout 120 mpirun -np 2 --oversubscribe --bind-to none "$kintsugi" \
    train --out "$out/killed" "${micro_run[@]}" --device "$device" --dp 2 --set train.steps=1000 \
    >"$out/killed_rank_ends_job.log" 2>&1
  status=$?
  echo "exit $status after $((SECONDS - start)) s" >>"$out/killed_rank_ends_job.log"
  [[ $status -ne 0 && $status -ne 124 ]] && grep -qiE "signal 9|killed" "$out/killed_rank_ends_job.log"
  verdict killed_rank_ends_job $?
fi
echo "gpu_layouts: $failures failed"
[[ $failures -eq 0 ]]
