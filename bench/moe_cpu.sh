#!/usr/bin/env bash
# moe_cpu.sh -- a mixture of experts against the dense model of the same active FLOPs, on the
# CPU, kintsugi beside plain PyTorch in the same run (docs/benchmarks.md, "Mixture of experts").
#
# The models: configs/moe-tiny.toml (llama-tiny's 4 layers of d_model 128, 4 heads (2 kv); every
# MLP 8 SwiGLU experts of width 88, each token to the top 2) with a vocabulary of 512 (the Brown
# corpus in GPT-2's BPE cut at 512 ids, so that the LM head does not hide the MLP: with Llama's
# 32000 ids it is 4x the MLP's FLOPs), and the same model with a dense SwiGLU of width
# 176 = 2 x 88: a token does the same MLP FLOPs in both (the MoE adds its router, d_model x 8
# per token), the MoE holds 4x the MLP weights. Each trains STEPS steps of B sequences of 128
# tokens (one micro-batch); the PyTorch peer (bench/pytorch/moe_step.py) runs the same shapes on
# a fixed random batch, with OMP_WAIT_POLICY=PASSIVE (bench/compare_cpu.sh's "passive": its
# OpenMP workers sleep between parallel regions instead of spinning, which on a shared 2-core
# machine otherwise costs it up to 10x). Every repeat runs the four in turn; the table takes each one's fastest
# repeat (others' work on a shared machine only ever adds time) and lists all of them.
# Prints one markdown table: ms/step (median of the steps after the first), tokens/s, the ratio
# MoE / dense of each implementation's tokens/s, parameters, and memory (kintsugi: its peak
# tracked bytes; both: the process's peak RSS).
#
# Usage: bench/moe_cpu.sh [--batch 8] [--steps 6] [--repeats 3] [--threads N] [--out DIR]
# Needs: build/kintsugi, data/ (scripts/fetch_data.sh), /usr/bin/python3 with Debian's
# python3-torch (scripts/setup.sh --bench).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"
PYTHON="${PYTHON:-/usr/bin/python3}"
BATCH=8
STEPS=6
REPEATS=3
THREADS="$(nproc)"
OUT="$(mktemp -d /tmp/kintsugi-moe.XXXXXX)"
while (($#)); do
  case "$1" in
    --batch) BATCH="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--batch B] [--steps N] [--repeats R] [--threads N] [--out DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
export OMP_NUM_THREADS="$THREADS"
data="$ROOT/data/brown/gpt2-512"
for ((repeat = 1; repeat <= REPEATS; repeat++)); do
  for model in dense moe; do
    shape=(--set model.vocab_size=512)
    [[ "$model" == moe ]] || shape+=(--set model.moe_experts=0 --set model.d_ff=176)
    echo "moe_cpu: repeat $repeat, kintsugi $model" >&2
    "$KINTSUGI" train --config "$ROOT/configs/moe-tiny.toml" "${shape[@]}" \
      --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" \
      --set "data.tokenizer=$ROOT/data/gpt2-512-tokenizer" --set "train.steps=$STEPS" \
      --set "train.global_batch=$BATCH" --set "train.micro_batch=$BATCH" --set train.warmup_steps=1 \
      --set train.eval_every=0 --set train.eval_sequences=1 --set train.log_every=1 \
      --set train.save_checkpoint=false --out "$OUT/kintsugi_${model}_$repeat" --overwrite \
      >"$OUT/kintsugi_${model}_$repeat.log"
    peer=(--vocab 512 --ffn 176)
    [[ "$model" == dense ]] || peer=(--vocab 512 --experts 8 --top-k 2 --ffn 88)
    echo "moe_cpu: repeat $repeat, pytorch $model" >&2
    OMP_WAIT_POLICY=PASSIVE "$PYTHON" "$ROOT/bench/pytorch/moe_step.py" --batch "$BATCH" --seq 128 --steps "$((STEPS - 1))" \
      --warmup 1 --threads "$THREADS" "${peer[@]}" >"$OUT/pytorch_${model}_$repeat.json"
  done
done

"$PYTHON" - "$OUT" "$BATCH" "$STEPS" "$THREADS" "$REPEATS" <<'PY'
import json, re, statistics, sys
out, batch, steps, threads, repeats = sys.argv[1], *map(int, sys.argv[2:6])
M = 1 << 20
tokens = batch * 128


def kintsugi(model, r):
    metrics = [json.loads(l) for l in open(f"{out}/kintsugi_{model}_{r}/metrics.jsonl")]
    metrics = [m for m in metrics if "loss" in m]
    run = json.load(open(f"{out}/kintsugi_{model}_{r}/run.json"))
    # The run's last line: "... (tensors; process peak RSS N MiB: ...)".
    rss = re.search(r"process peak RSS ([0-9]+) MiB", open(f"{out}/kintsugi_{model}_{r}.log").read())
    return dict(ms=statistics.median(m["step_ms"] for m in metrics[1:]), params=run["parameters"],
                tracked=sum(metrics[-1]["memory_peak_bytes"].values()),
                rss=int(rss.group(1)) * M if rss else 0)


def pytorch(model, r):
    peer = json.load(open(f"{out}/pytorch_{model}_{r}.json"))
    return dict(ms=peer["ms_per_step"], params=peer["parameters"], tracked=None,
                rss=peer["peak_rss_bytes"])


runs = {(impl, model): [read(model, r) for r in range(1, repeats + 1)]
        for impl, read in (("kintsugi", kintsugi), ("pytorch", pytorch)) for model in ("dense", "moe")}
best = {key: min(rs, key=lambda r: r["ms"]) for key, rs in runs.items()}
print(f"Tiny Llama (4 layers, d_model 128, 4 heads (2 kv), vocabulary 512), {batch} x 128 tokens per "
      f"step, {steps} steps (median of all but the first), fastest of {repeats} repeats, {threads} "
      f"threads, fp32. Dense: SwiGLU 176; MoE: 8 experts of 88, top 2 (the same MLP FLOPs per token).\n")
print("| implementation | MLP | ms/step | tokens/s | MoE / dense tokens/s | parameters | tracked MiB | peak RSS MiB | every repeat, ms |")
print("|:--|:--|--:|--:|--:|--:|--:|--:|:--|")
for impl in ("kintsugi", "pytorch"):
    for model in ("dense", "moe"):
        r = best[(impl, model)]
        ratio = best[(impl, "dense")]["ms"] / r["ms"]
        tracked = f"{r['tracked'] / M:,.0f}" if r["tracked"] is not None else "-"
        rss = f"{r['rss'] / M:,.0f}" if r["rss"] else "-"
        every = ", ".join(f"{x['ms']:,.0f}" for x in runs[(impl, model)])
        print(f"| {impl} | {model} | {r['ms']:,.0f} | {tokens / (r['ms'] / 1000):,.0f} | "
              f"{ratio:.2f} | {r['params'] / 1e6:.2f}M | {tracked} | {rss} | {every} |")
for model in ("dense", "moe"):
    k, p = best[("kintsugi", model)]["ms"], best[("pytorch", model)]["ms"]
    print(f"\nkintsugi's {model} step against PyTorch's: {p / k:.2f}x its tokens/s", end="")
print()
PY
