#!/usr/bin/env bash
# Generation speed on the CPU: `kintsugi generate` with its key/value cache and with
# --no-kv-cache (the whole window rerun for every token), for the three tiny presets and GPT-2
# (124M, 1024-token window), beside the plain-PyTorch peer (bench/pytorch/gpt2_generate.py,
# GPT-2 shapes only) with and without its own cache, in the same run. Greedy, batch 1, f32, a
# one-token prompt; each model is trained for one step first (speed does not depend on the
# weights). Prints one table; the results go in docs/benchmarks.md.
# Usage: bench/generate_cpu.sh [BUILD_DIR] [THREADS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}" threads="${2:-$(nproc)}"
kintsugi="$build/kintsugi"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS="$threads"
cd "$root"

# train_one NAME CONFIG [--set ...]: a one-step model in $work/NAME/model.
train_one() {
  local name="$1" config="$2"
  shift 2
  "$kintsugi" train --config "$config" --set train.steps=1 --set train.global_batch=1 \
    --set train.micro_batch=1 --set train.eval_every=0 --set train.warmup_steps=0 "$@" \
    --out "$work/$name" >/dev/null
}

# rate NAME TOKENS [flags]: tokens/s that generate reports on stderr.
rate() {
  local name="$1" tokens="$2"
  shift 2
  "$kintsugi" generate --checkpoint "$work/$name/model" --prompt "" --tokens "$tokens" \
    --temperature 0 --threads "$threads" "$@" 2>&1 >/dev/null |
    sed -n 's/^generated .*: \([0-9.]*\) tokens\/s.*/\1/p'
}

printf '%-22s %7s %7s | %12s %12s %8s | %12s %12s %8s\n' model window tokens \
  "kintsugi kv" "no cache" speedup "pytorch kv" "no cache" speedup
row() {  # row NAME WINDOW TOKENS [PEER FLAGS]
  local name="$1" window="$2" tokens="$3"
  shift 3
  local kv full peer_kv="-" peer_full="-" peer_speedup="-"
  kv="$(rate "$name" "$tokens")"
  full="$(rate "$name" "$tokens" --no-kv-cache)"
  if (($# > 0)); then
    read -r peer_kv peer_full < <(/usr/bin/python3 bench/pytorch/gpt2_generate.py "$@" \
      --seq "$window" --tokens "$tokens" --threads "$threads" --json |
      /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin)
print("%.1f %.1f" % (r["cache_tokens_per_s"], r["no_cache_tokens_per_s"]))')
    peer_speedup="$(awk -v a="$peer_kv" -v b="$peer_full" 'BEGIN{printf "%.1fx", a/b}')"
  fi
  printf '%-22s %7s %7s | %12s %12s %8s | %12s %12s %8s\n' "$name" "$window" "$tokens" "$kv" \
    "$full" "$(awk -v a="$kv" -v b="$full" 'BEGIN{printf "%.1fx", a/b}')" "$peer_kv" \
    "$peer_full" "$peer_speedup"
}

train_one gpt-tiny configs/gpt-tiny.toml
train_one llama-tiny configs/llama-tiny.toml
train_one bloom-tiny configs/bloom-tiny.toml
train_one gpt2-124M configs/gpt-tiny.toml --set model.preset=gpt2
row gpt-tiny 128 100 --layers 4 --d-model 128 --heads 4
row llama-tiny 128 100
row bloom-tiny 128 100
row gpt2-124M 1024 32 --layers 12 --d-model 768 --heads 12
echo "threads: $threads; tokens/s of greedy generation after a one-token prompt (kintsugi's" \
  "no-cache path reruns its whole window, the peer's only the context so far)"
