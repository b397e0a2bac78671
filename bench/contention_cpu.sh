#!/usr/bin/env bash
# CPU threads under contention: a GPT-2 124M training step (B=4, T=64, 2 threads) of kintsugi
# and of the PyTorch peer (bench/pytorch/gpt2_step.py), each on a quiet machine and beside one
# busy-loop process, interleaved. kintsugi as it starts by default (its bounded spin count,
# core/threads.hpp) and with the OpenMP runtime's own settings; PyTorch with its default and
# with OMP_WAIT_POLICY=PASSIVE. Prints median ms/step and the slowdown the competitor causes.
# Usage: bench/contention_cpu.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kintsugi="${1:-$root/build}/kintsugi"
rounds="${2:-3}"
export OMP_NUM_THREADS=2

step_ms() {  # step_ms ENV... -- COMMAND...: median ms/step from the command's JSON
  env "$@" | grep '^{' | tail -1 | /usr/bin/python3 -c \
    'import json, sys; r = json.load(sys.stdin); print(r.get("ms_per_step") or r["median_ms"])'
}
kintsugi_step() { step_ms "$@" "$kintsugi" bench step --model gpt2 --batch 4 --seq 64 --steps 5 \
  --warmup 1 --threads 2 --json; }
pytorch_step() { step_ms "$@" /usr/bin/python3 "$root/bench/pytorch/gpt2_step.py" --model gpt2 \
  --batch 4 --seq 64 --steps 5 --warmup 2 --threads 2 --json; }

declare -A variants=(
  ["kintsugi (default: bounded spinning)"]="kintsugi_step"
  ["kintsugi, GOMP_SPINCOUNT=300000 (libgomp's default)"]="kintsugi_step GOMP_SPINCOUNT=300000"
  ["kintsugi, OMP_WAIT_POLICY=PASSIVE"]="kintsugi_step OMP_WAIT_POLICY=PASSIVE"
  ["kintsugi, KINTSUGI_GEMM_BLOCKS=0 (OpenBLAS's static split)"]="kintsugi_step KINTSUGI_GEMM_BLOCKS=0"
  ["pytorch (default)"]="pytorch_step"
  ["pytorch, OMP_WAIT_POLICY=PASSIVE"]="pytorch_step OMP_WAIT_POLICY=PASSIVE"
)
order=("kintsugi (default: bounded spinning)" "kintsugi, GOMP_SPINCOUNT=300000 (libgomp's default)"
       "kintsugi, OMP_WAIT_POLICY=PASSIVE" "kintsugi, KINTSUGI_GEMM_BLOCKS=0 (OpenBLAS's static split)"
       "pytorch (default)" "pytorch, OMP_WAIT_POLICY=PASSIVE")
declare -A quiet busy
for ((r = 0; r < rounds; ++r)); do
  for name in "${order[@]}"; do
    quiet[$name]+="$(${variants[$name]}) "
    sh -c 'while :; do :; done' &
    hog=$!
    busy[$name]+="$(${variants[$name]}) "
    kill "$hog"
    wait "$hog" 2>/dev/null || true
  done
done
printf '%-52s | %12s | %16s | %8s\n' "variant (GPT-2 124M, B=4 T=64, 2 threads)" "quiet ms" \
  "1 busy process" slowdown
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for name in "${order[@]}"; do
  q="$(median <<<"${quiet[$name]}")" b="$(median <<<"${busy[$name]}")"
  printf '%-52s | %12.0f | %16.0f | %7.2fx\n' "$name" "$q" "$b" "$(awk -v a="$b" -v c="$q" 'BEGIN{print a/c}')"
done
echo "medians of $rounds rounds; each: quiet, then beside one busy loop (sh), interleaved"
