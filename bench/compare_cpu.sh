#!/usr/bin/env bash
# compare_cpu.sh -- kintsugi vs. plain PyTorch: GPT-2 training steps on the CPU, same machine, same run.
#
# What it measures
#   For each shape (batch B x sequence T) it times full fp32 training steps of GPT-2 (forward,
#   cross-entropy, backward, grad-norm clip 1.0, AdamW) with a fixed number of threads and prints
#   one markdown table per shape:
#     * kintsugi:    "$KINTSUGI" bench step --model M --batch B --seq T --steps N --json
#     * pytorch, in four variants of the runtime environment (bench/pytorch/gpt2_step.py):
#         installed   Debian's python3-torch exactly as installed (libgomp default wait policy,
#                     glibc malloc defaults)
#         passive     OMP_WAIT_POLICY=PASSIVE: OpenMP workers sleep instead of spinning between
#                     parallel regions (matters on a 2-core machine shared with other work)
#         tcmalloc    passive + LD_PRELOAD of Debian's libtcmalloc_minimal.so.4
#         tunables    passive + GLIBC_TUNABLES that keep big buffers in the heap (see GLIBC_TUNE below)
#         thp         tunables + glibc.malloc.hugetlb=1: malloc'd memory on transparent huge pages,
#                     as kintsugi puts its own large buffers (fair when THP is in madvise mode)
#   Columns: ms/step (median of the timed steps; median over repeats), tokens/s, GFLOP/s with
#   kintsugi's model-FLOP formula (6N + 12 L T d per token, N = 12 L d^2 + V d, V = 50257),
#   % of a measured GEMM rate, kintsugi's tokens/s divided by the row's tokens/s ("x kintsugi":
#   > 1 means kintsugi is faster), and the minor page faults per step (the allocator's footprint).
#   Every variant starts from a clean environment: OMP_WAIT_POLICY, LD_PRELOAD and GLIBC_TUNABLES
#   inherited from the caller are removed first, so a row means exactly what its name says.
#
# GEMM rate reference (for the "% of GEMM" column), first that is available:
#   1. env GEMM_GFLOPS=<number>
#   2. "$KINTSUGI" bench gemm --json --threads N  (JSON object with key "gflops"; note that
#      kintsugi also caches this value for its own MFU figures)
#   3. torch.mm on 4096^3 fp32 with the same thread count (bench/pytorch/sgemm_rate.py)
#   2 and 3 are measured before and after the step runs and the higher value is used.
#   The header line says which source was used.
#
# Noise: the machine is shared, so runs are interleaved -- for each repeat, each shape runs every
# implementation once, in an order rotated from one repeat to the next.  Each run reports the
# median of its timed steps; across repeats the BEST run is used for the rate columns (noise from
# other processes only ever adds time) and all repeats are listed.  Use --repeats 3 or more when
# others are using the machine, and look at the loadavg line.
#
# Usage
#   bench/compare_cpu.sh [--shapes 4x64,4x256:3] [--steps 5] [--warmup 2] [--threads 2]
#                        [--repeats 1] [--model gpt2] [--variants kintsugi,installed,passive,tcmalloc,tunables,thp]
#                        [--out DIR]
#   A shape is BxT or BxT:STEPS (STEPS overrides --steps for that shape).
#   Environment: KINTSUGI (default build/kintsugi), PYTHON (default /usr/bin/python3, which has
#   Debian's python3-torch), GEMM_GFLOPS, TCMALLOC_LIB (path overriding the search for tcmalloc).
#   Raw JSON of every run and its stderr are kept in --out (default: a new directory under /tmp).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEER="$ROOT/bench/pytorch/gpt2_step.py"
SGEMM="$ROOT/bench/pytorch/sgemm_rate.py"
PYTHON="${PYTHON:-/usr/bin/python3}"
KINTSUGI="${KINTSUGI:-$ROOT/build/kintsugi}"

SHAPES="4x64,4x256"
STEPS=5
WARMUP=2
THREADS=2
REPEATS=1
MODEL=gpt2
VARIANTS="kintsugi,installed,passive,tcmalloc,tunables,thp"
OUT=""

# glibc malloc tunables for the "tunables" variant.
#   mmap_threshold=4 GiB: glibc serves every request >= mmap_threshold (default 128 KiB, adapting
#     up to at most 32 MiB) with its own mmap and munmaps it on free.  A GPT-2 step allocates and
#     frees activations, gradients and optimizer temporaries of 10-200 MB every step (the logits
#     alone are B*T*50304*4 bytes), so each step page-faults gigabytes of fresh zeroed pages
#     (~550k minor faults per step at B=4 T=64).  4 GiB puts all of them in the heap instead.
#     (32 MiB, the default cap, is not enough: tensors such as the logits and the tied embedding's
#     gradient, 154 MB, stay above it.)
#   trim_threshold=4 GiB: free memory at the top of the heap is only given back to the kernel
#     (sbrk shrink) when more than this is free, so the heap keeps its pages from step to step.
#   Setting mmap_threshold also turns off glibc's dynamic threshold adjustment.  The cost is that
#   peak memory is kept for the life of the process -- what one wants for a training loop.
GLIBC_TUNE="glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "compare_cpu.sh: error: $*" >&2; exit 1; }
note() { echo "compare_cpu.sh: $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) SHAPES="$2"; shift 2 ;;
    --shape) SHAPES="${SHAPES_SET:+$SHAPES,}$2"; SHAPES_SET=1; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --variants) VARIANTS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for n in "$STEPS" "$WARMUP" "$THREADS" "$REPEATS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "expected a non-negative integer, got '$n'"
done
(( REPEATS >= 1 )) || die "--repeats must be >= 1"

[[ -x "$PYTHON" ]] || die "$PYTHON not found (Debian's python3 with python3-torch is needed)"
"$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON cannot import torch (apt install python3-torch)"
[[ -f "$PEER" ]] || die "missing $PEER"

if [[ -z "$OUT" ]]; then OUT="$(mktemp -d /tmp/kintsugi-compare-cpu.XXXXXX)"; fi
mkdir -p "$OUT"

# ---------------------------------------------------------------------------------------------
# tcmalloc: Debian's libtcmalloc-minimal4 installs libtcmalloc_minimal.so.4 in the multiarch dir.
find_tcmalloc() {
  local cand
  if [[ -n "${TCMALLOC_LIB:-}" && -f "${TCMALLOC_LIB}" ]]; then echo "$TCMALLOC_LIB"; return 0; fi
  # 1) the dynamic linker cache (right architecture), 2) the usual directories.
  cand="$(/sbin/ldconfig -p 2>/dev/null | awk '$1 == "libtcmalloc_minimal.so.4" {print $NF; exit}' || true)"
  if [[ -n "$cand" && -f "$cand" ]]; then echo "$cand"; return 0; fi
  local multiarch
  multiarch="$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || true)"
  for cand in ${multiarch:+/usr/lib/$multiarch/libtcmalloc_minimal.so.4} /usr/lib/*/libtcmalloc_minimal.so.4 \
              /usr/lib64/libtcmalloc_minimal.so.4 /usr/lib/libtcmalloc_minimal.so.4 /usr/local/lib/libtcmalloc_minimal.so.4; do
    if [[ -f "$cand" ]]; then echo "$cand"; return 0; fi
  done
  return 1
}
TCMALLOC="$(find_tcmalloc || true)"

# ---------------------------------------------------------------------------------------------
# kintsugi: does the binary exist and does it have `bench step` (and which options)?
HAVE_KINTSUGI=0
KINTSUGI_STEP_HELP=""
if [[ ",$VARIANTS," == *",kintsugi,"* ]]; then
  if [[ ! -x "$KINTSUGI" ]]; then
    note "kintsugi binary not found at $KINTSUGI (build it, or set KINTSUGI=...); continuing with the PyTorch rows only"
  elif ! KINTSUGI_STEP_HELP="$("$KINTSUGI" bench step --help 2>&1)"; then
    note "$KINTSUGI has no working 'bench step' subcommand yet; continuing with the PyTorch rows only"
  else
    HAVE_KINTSUGI=1
  fi
fi
# Options passed only if kintsugi's `bench step --help` lists them.
kintsugi_has_opt() { grep -q -- "$1" <<<"$KINTSUGI_STEP_HELP"; }

# ---------------------------------------------------------------------------------------------
# GEMM rate reference.  Measured once before and once after the step runs (the machine is
# shared; the higher of the two is used and both are printed).  GEMM_GFLOPS overrides it.
GEMM_SRC=""
measure_gemm() {  # prints "GFLOP/s<TAB>source" on stdout, or nothing
  local out help
  local -a args
  if [[ -x "$KINTSUGI" ]] && help="$("$KINTSUGI" bench gemm --help 2>&1)"; then
    args=(bench gemm --json)
    if grep -q -- "--threads" <<<"$help"; then args+=(--threads "$THREADS"); fi
    if out="$("$KINTSUGI" "${args[@]}" 2>>"$OUT/gemm.stderr")" && out="$("$PYTHON" -c 'import json,sys
lines=[l for l in sys.stdin.read().splitlines() if l.strip().startswith("{")]
print(float(json.loads(lines[-1])["gflops"]))' <<<"$out" 2>>"$OUT/gemm.stderr")"; then
      printf '%s\t%s\n' "$out" "$KINTSUGI ${args[*]}"; return 0
    fi
    note "'kintsugi bench gemm --json' gave no usable 'gflops'; falling back to torch.mm"
  fi
  if [[ -f "$SGEMM" ]] && out="$(env -u OMP_WAIT_POLICY -u LD_PRELOAD -u GLIBC_TUNABLES OMP_WAIT_POLICY=PASSIVE \
        "$PYTHON" "$SGEMM" --n 4096 --threads "$THREADS" --json 2>>"$OUT/gemm.stderr")"; then
    "$PYTHON" -c 'import json,sys; print(json.loads(sys.stdin.read())["gflops"], end="\t")' <<<"$out"
    echo "torch.mm fp32 4096^3, $THREADS threads, PyTorch's BLAS (bench/pytorch/sgemm_rate.py, best of 3)"
  fi
}
GEMM_BEFORE=""
GEMM_AFTER=""
if [[ -n "${GEMM_GFLOPS:-}" ]]; then
  GEMM_SRC="GEMM_GFLOPS environment variable"
else
  note "measuring the GEMM rate (before the step runs)"
  GEMM_BEFORE="$(measure_gemm || true)"
fi

# ---------------------------------------------------------------------------------------------
# One run = one JSON file $OUT/<shape>__<variant>__r<rep>.json (last JSON line of stdout).
run_one() {  # variant B T steps rep
  local variant="$1" B="$2" T="$3" steps="$4" rep="$5"
  local base="$OUT/${B}x${T}__${variant}__r${rep}"
  local -a envv=(env -u OMP_WAIT_POLICY -u LD_PRELOAD -u GLIBC_TUNABLES)
  local -a cmd
  case "$variant" in
    kintsugi)
      cmd=("$KINTSUGI" bench step --model "$MODEL" --batch "$B" --seq "$T" --steps "$steps" --json)
      if kintsugi_has_opt "--threads"; then cmd+=(--threads "$THREADS"); fi
      if kintsugi_has_opt "--warmup"; then cmd+=(--warmup "$WARMUP"); fi ;;
    installed) ;;
    passive)   envv+=(OMP_WAIT_POLICY=PASSIVE) ;;
    tcmalloc)  envv+=(OMP_WAIT_POLICY=PASSIVE LD_PRELOAD="$TCMALLOC") ;;
    tunables)  envv+=(OMP_WAIT_POLICY=PASSIVE GLIBC_TUNABLES="$GLIBC_TUNE") ;;
    thp)       envv+=(OMP_WAIT_POLICY=PASSIVE GLIBC_TUNABLES="$GLIBC_TUNE:glibc.malloc.hugetlb=1") ;;
    *) die "unknown variant '$variant'" ;;
  esac
  if [[ "$variant" != kintsugi ]]; then
    cmd=("$PYTHON" "$PEER" --model "$MODEL" --batch "$B" --seq "$T" --steps "$steps" --warmup "$WARMUP"
         --threads "$THREADS" --label "$variant" --json)
  fi
  note "[$(date +%H:%M:%S)] rep $rep  ${B}x${T}  $variant"
  local out
  if out="$("${envv[@]}" "${cmd[@]}" 2>"$base.stderr")"; then
    grep '^[[:space:]]*{' <<<"$out" | tail -n 1 >"$base.json" || true
    if [[ ! -s "$base.json" ]]; then
      note "  $variant printed no JSON object (stdout kept in $base.stdout)"; printf '%s\n' "$out" >"$base.stdout"; rm -f "$base.json"
    fi
  else
    note "  $variant failed (exit $?); stderr:"; tail -n 5 "$base.stderr" >&2 || true
    rm -f "$base.json"
  fi
}

# Variants actually run (skip the ones whose prerequisites are missing, saying so once).
declare -a RUN_VARIANTS=()
IFS=',' read -r -a want <<<"$VARIANTS"
for v in "${want[@]}"; do
  case "$v" in
    kintsugi) (( HAVE_KINTSUGI )) && RUN_VARIANTS+=(kintsugi) ;;
    tcmalloc) if [[ -n "$TCMALLOC" ]]; then RUN_VARIANTS+=(tcmalloc)
              else note "libtcmalloc_minimal.so.4 not found (apt install libtcmalloc-minimal4); skipping 'tcmalloc'"; fi ;;
    installed|passive|tunables|thp) RUN_VARIANTS+=("$v") ;;
    "") ;;
    *) die "unknown variant '$v' (kintsugi, installed, passive, tcmalloc, tunables, thp)" ;;
  esac
done
(( ${#RUN_VARIANTS[@]} > 0 )) || die "nothing to run"

IFS=',' read -r -a shape_list <<<"$SHAPES"
for s in "${shape_list[@]}"; do
  [[ "$s" =~ ^[0-9]+x[0-9]+(:[0-9]+)?$ ]] || die "bad shape '$s' (expected BxT or BxT:STEPS)"
done

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
# Interleave: repeat -> shape -> variants, the variant order rotated by one each repeat.
nv=${#RUN_VARIANTS[@]}
for (( rep = 1; rep <= REPEATS; rep++ )); do
  for s in "${shape_list[@]}"; do
    bt="${s%%:*}"; B="${bt%x*}"; T="${bt#*x}"
    steps="$STEPS"; [[ "$s" == *:* ]] && steps="${s#*:}"
    for (( i = 0; i < nv; i++ )); do
      run_one "${RUN_VARIANTS[$(( (i + rep - 1) % nv ))]}" "$B" "$T" "$steps" "$rep"
    done
  done
done
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n "${GEMM_GFLOPS:-}" ]]; then
  GEMM_RATE="$GEMM_GFLOPS"
else
  note "measuring the GEMM rate (after the step runs)"
  GEMM_AFTER="$(measure_gemm || true)"
  GEMM_SRC="${GEMM_BEFORE#*$'\t'}"; [[ -n "$GEMM_SRC" ]] || GEMM_SRC="${GEMM_AFTER#*$'\t'}"
  GEMM_BEFORE="${GEMM_BEFORE%%$'\t'*}"; GEMM_AFTER="${GEMM_AFTER%%$'\t'*}"
  GEMM_RATE="$("$PYTHON" -c 'import sys
v=[float(x) for x in sys.argv[1:] if x]
print(max(v) if v else "")' "$GEMM_BEFORE" "$GEMM_AFTER")"
  if [[ -n "$GEMM_RATE" ]]; then
    GEMM_SRC="$GEMM_SRC; higher of before/after: ${GEMM_BEFORE:-n/a} / ${GEMM_AFTER:-n/a} GFLOP/s"
  fi
fi

# ---------------------------------------------------------------------------------------------
# Tables.
"$PYTHON" - "$OUT" "$MODEL" "$THREADS" "$REPEATS" "$SHAPES" "${GEMM_RATE:-}" "${GEMM_SRC:-}" \
          "$LOAD_START" "$LOAD_END" "$TCMALLOC" "$GLIBC_TUNE" "$HAVE_KINTSUGI" "${RUN_VARIANTS[*]}" <<'PY'
import glob, json, os, statistics, sys
(out, model, threads, repeats, shapes, gemm, gemm_src, load0, load1, tcmalloc, tune,
 have_k, variants) = sys.argv[1:]
gemm = float(gemm) if gemm else None
variants = variants.split()
PRESETS = {"gpt2": (12, 768), "gpt2-medium": (24, 1024), "gpt2-large": (36, 1280), "gpt2-xl": (48, 1600)}

def flops_per_step(B, T):  # kintsugi's model-FLOP formula, true vocabulary 50257
    L, d = PRESETS.get(model, (None, None))
    if L is None:
        return None
    return (6 * (12 * L * d * d + 50257 * d) + 12 * L * T * d) * B * T

def first(r, *keys):
    for k in keys:
        if isinstance(r.get(k), (int, float)):
            return float(r[k])
    return None

desc = {
    "kintsugi": "kintsugi `bench step`",
    "installed": "pytorch, as installed",
    "passive": "pytorch, OMP_WAIT_POLICY=PASSIVE",
    "tcmalloc": "pytorch, PASSIVE + tcmalloc",
    "tunables": "pytorch, PASSIVE + glibc tunables",
    "thp": "pytorch, PASSIVE + glibc tunables + huge pages",
}
meta = None
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    try:
        r = json.load(open(f))
    except Exception:
        continue
    if r.get("impl") == "pytorch":
        meta = r
        break

print(f"## GPT-2 training step on CPU: kintsugi vs PyTorch ({model}, {threads} threads)\n")
if meta:
    print(f"- machine: {meta['cpu']}, {meta['nproc']} CPUs; torch {meta['torch']}; BLAS: {meta['blas']}")
print(f"- loadavg (1/5/15 min) before: {load0}; after: {load1}; repeats: {repeats} (interleaved)")
print("- ms/step: median over a run's timed steps; with repeats, the best run (all runs in brackets);"
      " the other columns come from that best run")
print(f"- GEMM rate: " + (f"{gemm:.1f} GFLOP/s ({gemm_src})" if gemm else "not available"))
print(f"- tcmalloc: {tcmalloc or 'not found'}; glibc tunables: {tune}")
if have_k != "1":
    print("- kintsugi: not measured (binary or `bench step` subcommand missing) -- ratio column empty")
print("- GFLOP/s = model FLOPs (6N + 12LTd per token, N = 12Ld^2 + 50257d) / ms/step;"
      " `x kintsugi` = kintsugi tokens/s / row tokens/s (> 1: kintsugi faster)\n")

for s in shapes.split(","):
    bt = s.split(":")[0]
    B, T = (int(x) for x in bt.split("x"))
    rows = {}
    for v in variants:
        runs = []  # (repeat, run JSON) in repeat order
        for f in glob.glob(os.path.join(out, f"{bt}__{v}__r*.json")):
            try:
                rep = int(f.rsplit("__r", 1)[1].split(".")[0])
                r = json.load(open(f))
            except Exception:
                continue
            if first(r, "ms_per_step"):
                runs.append((rep, r))
        if not runs:
            rows[v] = None
            continue
        runs.sort(key=lambda x: x[0])
        # each run: median over its timed steps; across repeats keep the best (fastest) run
        br = min((r for _, r in runs), key=lambda r: first(r, "ms_per_step"))
        best = first(br, "ms_per_step")
        fl = flops_per_step(B, T)
        gflops = first(br, "gflops") or (fl / best / 1e6 if fl else None)
        rows[v] = dict(ms=best, all=[first(r, "ms_per_step") for _, r in runs], n=len(runs),
                       tps=B * T / best * 1e3, gflops=gflops, faults=first(br, "minor_faults_per_step"),
                       loss=first(br, "loss_last", "loss"))
    k = rows.get("kintsugi")
    print(f"### B={B} T={T} ({B*T} tokens/step)\n")
    print("| implementation / variant | ms/step | tokens/s | GFLOP/s | % of GEMM | x kintsugi | faults/step | loss |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for v in variants:
        r = rows.get(v)
        if r is None:
            print(f"| {desc[v]} | failed / no data | | | | | | |")
            continue
        ms = f"{r['ms']:.0f}" + (" (" + ", ".join(f"{m:.0f}" for m in r["all"]) + ")" if r["n"] > 1 else "")
        gfs = f"{r['gflops']:.1f}" if r["gflops"] else "-"
        pct = f"{100 * r['gflops'] / gemm:.0f}%" if (gemm and r["gflops"]) else "-"
        ratio = f"{k['tps'] / r['tps']:.2f}" if k else "-"
        faults = f"{r['faults']:.0f}" if r["faults"] is not None else "-"
        loss = f"{r['loss']:.3f}" if r["loss"] is not None else "-"
        print(f"| {desc[v]} | {ms} | {r['tps']:.1f} | {gfs} | {pct} | {ratio} | {faults} | {loss} |")
    print()
print(f"raw JSON and stderr of every run: {out}")
PY
