#!/usr/bin/env bash
# context_cpu.sh -- context parallelism on long sequences, measured: a tiny GPT (2 layers,
# d_model 64, 4 heads, 512 ids) trained for a few steps on one sequence of T = 4K..32K tokens
# per step, on cp = 1, 2 and 4 ranks with each exchange (parallel.cp_comm = all_to_all, ring).
# Prints one markdown table: the peak tracked memory per rank (activations, workspace, all
# categories) and the step time, each beside its ratio to cp = 1 at the same T, and the bytes
# the exchange sent per rank and step (cp.all_to_all or the ring's cp.send; measured, run.json's
# theory in parentheses).
#
# Usage: bench/context_cpu.sh [--seqs 4096,8192,16384,32768] [--cps 1,2,4]
#                             [--comms all_to_all,ring] [--steps 2] [--out DIR]
# Needs: build/kintsugi, data/ (scripts/fetch_data.sh), mpirun, /usr/bin/python3 (to summarize).
# The ranks share the machine's cores (cores / ranks threads each, at least 1), so the step
# time compares the same total compute spread over more processes; on a machine with a core
# per rank (or a GPU per rank) it would fall as 1/cp.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"
SEQS=4096,8192,16384,32768
CPS=1,2,4
COMMS=all_to_all,ring
STEPS=2
OUT="$(mktemp -d /tmp/kintsugi-context.XXXXXX)"
while (($#)); do
  case "$1" in
    --seqs) SEQS="$2"; shift 2 ;;
    --cps) CPS="$2"; shift 2 ;;
    --comms) COMMS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--seqs T,T,...] [--cps N,N,...] [--comms C,C] [--steps N] [--out DIR]" >&2
       exit 2 ;;
  esac
done
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data="$ROOT/data/brown/gpt2-512"
names=()
for seq in ${SEQS//,/ }; do
  for cp in ${CPS//,/ }; do
    for comm in ${COMMS//,/ }; do
      ((cp == 1)) && [[ "$comm" != "${COMMS%%,*}" ]] && continue  # cp 1 exchanges nothing
      name="T${seq}_cp${cp}_${comm}"
      names+=("$name")
      threads=$(($(nproc) / cp > 0 ? $(nproc) / cp : 1))
      echo "context_cpu: T $seq, cp $cp, $comm" >&2
      OMP_NUM_THREADS=$threads mpirun -q -np "$cp" --oversubscribe --bind-to none "$KINTSUGI" train \
        --config "$ROOT/configs/gpt-tiny.toml" --set model.n_layer=2 --set model.d_model=64 \
        --set model.n_head=4 --set model.vocab_size=512 --set "model.seq_len=$seq" \
        --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" \
        --set "data.tokenizer=$ROOT/data/gpt2-512-tokenizer" \
        --set "train.steps=$STEPS" --set train.global_batch=1 --set train.micro_batch=1 \
        --set train.warmup_steps=1 --set train.eval_every=0 --set train.eval_sequences=1 \
        --set train.log_every=1 --set train.save_checkpoint=false --cp "$cp" --cp-comm "$comm" \
        --out "$OUT/$name" --overwrite >"$OUT/$name.log"
    done
  done
done

/usr/bin/python3 - "$OUT" "$(nproc)" "$STEPS" "${names[@]}" <<'PY'
import json, sys
out, cores, steps, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
M = 1 << 20
rows = {}
for name in names:
    t, c, comm = name.split("_", 2)
    seq, cp = int(t[1:]), int(c[2:])
    metrics = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    metrics = [m for m in metrics if "loss" in m]
    peak = metrics[-1]["memory_peak_bytes"]
    theory = json.load(open(f"{out}/{name}/run.json"))["comm_bytes_per_step_theory"]
    key = "cp.send" if comm == "ring" else "cp.all_to_all"
    rows[(seq, cp, comm if cp > 1 else "-")] = dict(
        act=peak["activations"], work=peak["workspace"], total=sum(peak.values()),
        ms=metrics[-1]["step_ms"], sent=metrics[-1].get("comm_bytes_sent", {}).get(key, 0),
        theory=theory.get(key, 0), loss=metrics[-1]["loss"])
print(f"Tiny GPT (2 layers, d_model 64, 4 heads), one sequence of T tokens per step, {steps} steps; "
      f"cp ranks share {cores} CPU cores. Peak tracked MiB per rank (ratio to cp 1); step time of "
      f"the last step (ratio to cp 1); KiB the exchange sent per rank and step (theory): "
      f"cp.all_to_all, or the ring's cp.send.\n")
print("| T | cp | exchange | activations | workspace | all tracked | step ms | exchange KiB/step | loss |")
print("|--:|--:|:--|--:|--:|--:|--:|--:|--:|")
for (seq, cp, comm), r in sorted(rows.items()):
    base = rows.get((seq, 1, "-"))
    ratio = lambda k: f" ({r[k] / base[k]:.2f})" if base and cp != 1 else ""
    print(f"| {seq} | {cp} | {comm} | {r['act'] / M:,.1f}{ratio('act')} | {r['work'] / M:,.1f}{ratio('work')} | "
          f"{r['total'] / M:,.1f}{ratio('total')} | {r['ms']:,.0f}{ratio('ms')} | "
          f"{r['sent'] / 1024:,.0f} ({r['theory'] / 1024:,.0f}) | {r['loss']:.4f} |")
PY
