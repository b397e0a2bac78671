#!/usr/bin/env bash
# Checks kintsugi on one NVIDIA GPU in one go: the GPU tests, multi-rank layouts sharing the GPU
# through MPI (bench/gpu_layouts.sh), the GEMM rate, exports loaded by transformers
# (bench/transformers_check.sh), and GPT-2 124M
# (B=32, T=1024) and GPT-2 1.5B (B=8, T=1024) training steps in bf16, each side by side with the
# PyTorch peer (bench/pytorch/gpt2_step_cuda.py, eager and torch.compile) run in the same go,
# with Llama- and BLOOM-style presets of similar sizes, a repeat of the 124M run that must give
# the same bits, the planner's prediction of the two GPT-2 steps, and causal attention per
# layer beside PyTorch's fused attention kernels (bench/pytorch/attention_peer.py: FlashAttention-2,
# cuDNN, memory-efficient) on the same shapes. Every step row gives the
# measured joules per token where NVML's energy counter was read (kintsugi's own, dlopen'ed;
# the peer's through pynvml when installed), `unmeasured` and the reason otherwise
# (docs/energy.md).
# Logs, JSON results and results.md (the table, printed last) go to $OUT (default
# ./gpu_check_out). Runs from an unpacked bundle (scripts/bundle.sh) or from a source tree with
# a CUDA build (KINTSUGI_BUILD, default build-cuda/ then build/).
#
#   bash bench/gpu_check.sh                   everything
#   GPU_CHECK_QUICK=1 bash bench/gpu_check.sh  fewer timed steps (a smoke run)
#   GPU_CHECK_SKIP="layouts compiled"          parts left out: tests, layouts, gemm,
#                                              transformers, kintsugi, repeat, variants,
#                                              baseline, profile, cuda_core, eager, compiled,
#                                              plan, attention
#   GPU_CHECK_MODELS="gpt2:32 gpt2-xl:8"       model presets and batches (default: GPT-2 124M
#                                              and 1.5B, Llama 125M and 1.1B, BLOOM 560M, 1b7)
#   GPU_CHECK_COMPILED="gpt2 gpt2-xl"          the models torch.compile runs (minutes each)
#   GPU_CHECK_VARIANTS="KINTSUGI_X=0 ..."      extra GPT-2 124M rows, one per assignment
#   GPU_CHECK_BASELINE=DIR                     another kintsugi build or bundle timed beside
#   GPU_PEAK_TFLOPS=989                        dense bf16 peak for MFU (H100 SXM: 989)
#
# Exit status: 0 when every GPU test passed and every benchmark ran; 1 otherwise; 2 when no GPU
# is visible (nothing is measured then).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$PWD/gpu_check_out}"
peak="${GPU_PEAK_TFLOPS:-989}"
python="${PYTHON:-python3}"
steps=20 warmup=5
[[ -n "${GPU_CHECK_QUICK:-}" ]] && steps=3 warmup=2

if [[ -x "$here/libexec/kintsugi" ]]; then  # an unpacked bundle
  kintsugi="$here/bin/kintsugi" gpu_tests="$here/bin/kintsugi_gpu_tests" check_run="$here/bin/check_run"
  export PATH="$here/bin:$PATH"  # the bundle's mpirun
else
  build="${KINTSUGI_BUILD:-}"
  if [[ -z "$build" ]]; then
    for b in "$here/build-cuda" "$here/build"; do
      grep -qs '^KINTSUGI_CUDA:BOOL=ON' "$b/CMakeCache.txt" && build="$b" && break
    done
  fi
  if [[ -z "$build" || ! -x "$build/kintsugi" || ! -x "$build/tests/gpu/kintsugi_gpu_tests" ]] ||
    ! grep -qs '^KINTSUGI_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
    echo "gpu_check: no CUDA build found: build one with scripts/build.sh -DKINTSUGI_CUDA=ON" \
      "(or set KINTSUGI_BUILD), or run this from a bundle (scripts/bundle.sh)" >&2
    exit 1
  fi
  kintsugi="$build/kintsugi" gpu_tests="$build/tests/gpu/kintsugi_gpu_tests"
  check_run="$build/tests/check_run"
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mkdir -p "$out"
if ! "$gpu_tests" --device-present; then
  echo "gpu_check: no CUDA device is visible (nvidia-smi: $(nvidia-smi -L 2>&1 | head -1))." \
    "Run this on a machine with an NVIDIA GPU and its driver; nothing was measured." >&2
  exit 2
fi

failures=0
limit="${GPU_CHECK_STEP_LIMIT:-600}"  # seconds any one step may take: a hang fails, not stalls
run() {  # run NAME COMMAND...: output to $out/NAME.log (JSON lines to NAME.json), status noted
  local name="$1"
  shift
  echo "== $name: $*"
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  grep -h '^{' "$out/$name.log" | tail -1 >"$out/$name.json"
  echo "$rc" >"$out/$name.rc"
  if [[ $rc -ne 0 ]]; then
    echo "   failed (exit $rc): see $out/$name.log"
    failures=$((failures + 1))
  fi
}

{
  date -u
  nvidia-smi 2>&1
  echo "kintsugi: $kintsugi ($(cat "$here/COMMIT" 2>/dev/null || git -C "$here" describe --always --dirty 2>/dev/null))"
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} >"$out/environment.txt"

skip=" ${GPU_CHECK_SKIP//,/ } "
wanted() { [[ "$skip" != *" $1 "* ]]; }

wanted tests && run gpu_tests "$gpu_tests" --gtest_output="xml:$out/gpu_tests.xml"
# The layouts are some 30 short multi-rank runs (1D and 3D tensor parallelism): twice the limit.
wanted layouts && limit=$((2 * limit)) run gpu_layouts bash "$here/bench/gpu_layouts.sh" \
  "$kintsugi" "$check_run" "$out/layouts"
wanted gemm && run gemm_bf16 "$kintsugi" bench gemm --device cuda --dtype bf16 --size 8192 --json

# Exports loaded by transformers itself (AutoTokenizer, AutoModelForCausalLM): ids and loss
# equal kintsugi's, for GPT-2, Llama and BLOOM (needs the fetched data: scripts/fetch_data.sh).
if ! wanted transformers; then
  :
elif "$python" -c 'import transformers' 2>/dev/null && [[ -f "$here/data/brown/llama2/val.bin" ]]; then
  run transformers_check env PYTHON="$python" bash "$here/bench/transformers_check.sh" \
    "$kintsugi" "$out/transformers"
  # Model folders both ways: kintsugi's sharded export read by transformers, transformers'
  # save_pretrained shards read by `kintsugi train --init-from FOLDER` (docs/checkpoints.md).
  run transformers_folder_check env PYTHON="$python" bash \
    "$here/bench/transformers_folder_check.sh" "$kintsugi" "$check_run" "$out/transformers"
else
  echo "transformers check skipped: no transformers in $python or no data/ (scripts/fetch_data.sh)" \
    >"$out/transformers_check.log"
fi

# Each model at its batch: kintsugi, then PyTorch eager and compiled, on the same GPU in the
# same go (compiled last: torch.compile spends a minute or more compiling each model before it
# measures, so by default only the two GPT-2 sizes the goal is stated for are compiled).
# GPT-2 124M only: `repeat` (the same step benchmark again: its losses and gradient norms must
# equal the first run's bit for bit), `variants` (one run per environment assignment in
# GPU_CHECK_VARIANTS, e.g. "KINTSUGI_FUSED_LOSS=0 KINTSUGI_TYPED_KERNELS=0": each new fast path
# against the one it replaced, in the same go), `profile` (time per op) and `cuda_core` (the
# CUDA-core attention kernels). `baseline` times every model with another build of kintsugi too
# (GPU_CHECK_BASELINE: a bundle or build whose bin/kintsugi or kintsugi runs; default
# ./baseline beside this bundle's bin/), so an older commit is measured in the same go.
models="${GPU_CHECK_MODELS:-gpt2:32 gpt2-xl:8 llama-125m:32 llama-1.1b:8 bloom-560m:8 bloom-1b7:8}"
compiled_models=" ${GPU_CHECK_COMPILED:-gpt2 gpt2-xl} "
baseline_dir="${GPU_CHECK_BASELINE:-$here/baseline}"
baseline=""
for b in "$baseline_dir/bin/kintsugi" "$baseline_dir/kintsugi"; do
  [[ -x "$b" ]] && baseline="$b" && break
done
echo "$models" >"$out/models.txt"
echo "${GPU_CHECK_VARIANTS:-}" >"$out/variants.txt"
[[ -n "$baseline" ]] &&
  echo "$(cat "$baseline_dir/COMMIT" 2>/dev/null || echo "$baseline")" >"$out/baseline.txt"
for mode in kintsugi repeat variants baseline profile cuda_core eager compiled; do
  wanted $mode || continue
  for case in $models; do
    model="${case%%:*}" batch="${case##*:}"
    step=(bench step --device cuda --precision bf16 --model "$model" --batch "$batch"
          --seq 1024 --steps "$steps" --warmup "$warmup")
    case $mode in
      kintsugi) run "kintsugi_${model}_b$batch" "$kintsugi" "${step[@]}" --json; continue ;;
      baseline)
        [[ -n "$baseline" ]] && run "baseline_${model}_b$batch" "$baseline" "${step[@]}" --json
        continue ;;
      repeat | variants | profile | cuda_core) [[ $model == gpt2 ]] || continue ;;&
      repeat) run "repeat_${model}_b$batch" "$kintsugi" "${step[@]}" --json; continue ;;
      variants)
        for v in ${GPU_CHECK_VARIANTS:-}; do
          # Named by the assignment (the same variable may come with several values).
          run "variant_${v/=/_}_${model}_b$batch" env "$v" "$kintsugi" "${step[@]}" --json
        done
        continue ;;
      profile) run "kintsugi_${model}_b${batch}_profile" "$kintsugi" "${step[@]}" --profile; continue ;;
      cuda_core)
        run "kintsugi_cuda_core_${model}_b$batch" env KINTSUGI_TENSOR_CORE_ATTENTION=0 \
          "$kintsugi" "${step[@]}" --json
        continue ;;
    esac
    flag=""
    if [[ $mode == compiled ]]; then
      [[ "$compiled_models" == *" $model "* ]] || continue
      flag="--compile"
    fi
    run "pytorch_${mode}_${model}_b$batch" "$python" "$here/bench/pytorch/gpt2_step_cuda.py" \
      --model "$model" --batch "$batch" --seq 1024 --steps "$steps" --warmup "$warmup" \
      --peak-tflops "$peak" $flag --json
  done
done

# PyTorch's fused attention kernels on the GPT-2 shapes (results.md sets them beside the
# attention ops of kintsugi's `profile` run).
wanted attention && run attention_peer "$python" "$here/bench/pytorch/attention_peer.py" --json

# The planner's prediction for this GPU (`plan --cluster local --device cuda`) of the two GPT-2
# steps above, one micro-batch of the whole batch, to set beside the measured step.
if wanted plan; then
  # The links the local spec reads (MPI between two host processes), cached for plan.
  run bench_comm mpirun -np 2 --oversubscribe "$kintsugi" bench comm
  for case in gpt2:32 gpt2-xl:8; do
    model="${case%%:*}" batch="${case##*:}"
    run "plan_${model}_b$batch" "$kintsugi" plan --cluster local --device cuda --model "$model" \
      --global-batch "$batch" --micro-batch "$batch" --seq 1024 --precision bf16 --zero 0 \
      --recompute none --top 1 --json
  done
fi

"$python" - "$out" "$peak" >"$out/results.md" <<'EOF'
import json, pathlib, re, sys, xml.etree.ElementTree as ET
out, peak = pathlib.Path(sys.argv[1]), float(sys.argv[2])
def load(name):
    """The JSON a step printed: its last one-line object, or a pretty-printed one (plan)."""
    try:
        return json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        pass
    try:
        lines = (out / f"{name}.log").read_text().splitlines()
        return json.loads("\n".join(lines[lines.index("{"):]))
    except (OSError, ValueError):
        return None
env = (out / "environment.txt").read_text().splitlines()
print(f"# kintsugi GPU check ({env[0]})\n")
try:
    suites = ET.parse(out / "gpu_tests.xml").getroot()
    print(f"GPU tests: {suites.get('tests')} run, {suites.get('failures')} failed, "
          f"{suites.get('disabled', 0)} disabled (gpu_tests.log)\n")
except (OSError, ET.ParseError):
    print("GPU tests: no result (gpu_tests.log)\n")
try:
    lines = (out / "gpu_layouts.log").read_text().splitlines()
    verdicts = [l for l in lines if l.startswith(("PASS", "FAIL"))]
    print(f"Multi-rank layouts on the one GPU through MPI (gpu_layouts.log): "
          f"{sum(l.startswith('PASS') for l in verdicts)} of {len(verdicts)} passed")
    for l in verdicts:
        if l.startswith("FAIL"):
            print(f"- {l}")
    print()
except OSError:
    pass
g = load("gemm_bf16")
if g:
    print(f"cuBLASLt bf16 GEMM {g['size']}^3 on {g['hardware']}: {g['gflops'] / 1e3:.0f} TFLOP/s\n")
try:
    print("transformers loads the exports: " +
          "; ".join((out / "transformers_check.log").read_text().strip().splitlines()[-3:]) + "\n")
except OSError:
    pass
try:
    print("Hugging Face model folders: " +
          "; ".join((out / "transformers_folder_check.log").read_text().strip().splitlines()[-3:])
          + "\n")
except OSError:
    pass
print(f"MFU: model FLOPs (6N + 12 L T d per token) over a dense bf16 peak of {peak:.0f} TFLOP/s\n")
print("| model | B x T | implementation | ms/step | tokens/s | TFLOP/s | MFU | peak memory GiB | mJ/token (NVML) | vs compiled | vs eager |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
models = [(c.split(":")[0], int(c.split(":")[1])) for c in (out / "models.txt").read_text().split()]
variants = (out / "variants.txt").read_text().split()
try:
    baseline = (out / "baseline.txt").read_text().strip()
except OSError:
    baseline = None
unmeasured_energy = set()  # why a row has no J/token, once each
for model, batch in models:
    tag = f"{model}_b{batch}"
    rows = [("kintsugi (bf16)", f"kintsugi_{tag}"), ("kintsugi, second run", f"repeat_{tag}")]
    rows += [(f"kintsugi, {v}", f"variant_{v.replace('=', '_', 1)}_{tag}") for v in variants]
    if baseline:
        rows.append((f"kintsugi baseline ({baseline})", f"baseline_{tag}"))
    rows += [("kintsugi, CUDA-core attention", f"kintsugi_cuda_core_{tag}"),
             ("PyTorch eager", f"pytorch_eager_{tag}"),
             ("PyTorch compiled", f"pytorch_compiled_{tag}")]
    compiled, eager = load(f"pytorch_compiled_{tag}"), load(f"pytorch_eager_{tag}")
    for impl, name in rows:
        r = load(name)
        if not r:
            if (out / f"{name}.rc").exists():
                print(f"| {model} | {batch} x 1024 | {impl} | failed: {name}.log | | | | | | | |")
            continue
        tflops = r.get("tflops", r.get("gflops", 0) / 1e3)
        ratio = lambda peer: f"{r['ms_per_step'] / peer['ms_per_step']:.2f}" if peer else ""
        # Measured energy (docs/energy.md): kintsugi's NVML counter, the peer's through pynvml.
        energy = (f"{r['joules_per_token'] * 1e3:.3f}" if "joules_per_token" in r
                  else "unmeasured")
        if "energy_source" in r and "joules_per_token" not in r:
            unmeasured_energy.add(r["energy_source"])
        print(f"| {model} | {batch} x 1024 | {impl} | {r['ms_per_step']:.1f} | "
              f"{r['tokens_per_s']:.0f} | {tflops:.1f} | {100 * tflops / peak:.1f}% | "
              f"{r['peak_memory_bytes'] / 2**30:.1f} | {energy} | {ratio(compiled)} | "
              f"{ratio(eager)} |")
print("\n(vs compiled, vs eager: kintsugi's step time over the peer's, same run; below 1 is faster."
      " mJ/token: NVML's total-energy counter read around each timed step, their sum over the"
      " step's tokens; unmeasured where no counter was read)\n")
for why in sorted(unmeasured_energy):
    print(f"- energy unmeasured: {why}")
if unmeasured_energy:
    print()

# Determinism: the second run of the same benchmark gives the same losses and gradient norms.
for model, batch in models:
    a, b = load(f"kintsugi_{model}_b{batch}"), load(f"repeat_{model}_b{batch}")
    if a and b and "losses" in a:
        same = a["losses"] == b["losses"] and a["grad_norms"] == b["grad_norms"]
        print(f"Determinism, {model} B={batch}: the second run's {len(b['losses'])} losses and "
              f"gradient norms are {'bit for bit the same' if same else 'DIFFERENT'} "
              f"(first loss {a['losses'][0]!r}, last {a['losses'][-1]!r})\n")

# Attention per layer: kintsugi's ops as its profile timed them inside the 124M step (between
# events, per call), PyTorch's SDPA backends alone on the same shape.
peers = []
try:
    for line in (out / "attention_peer.log").read_text().splitlines():
        if line.startswith("{"):
            peers.append(json.loads(line))
except (OSError, ValueError):
    pass
ours = {}
try:
    for line in (out / "kintsugi_gpt2_b32_profile.log").read_text().splitlines():
        m = re.match(r"(attention_forward|attention_backward)\s+(\d+)\s+([\d.]+)\s", line)
        if m and m.group(1) not in ours:
            ours[m.group(1)] = float(m.group(3)) / int(m.group(2))
except OSError:
    pass
if peers or ours:
    print("Causal attention per layer, bf16 (ms; kintsugi's from its profile of the GPT-2 124M "
          "step, per call; PyTorch's SDPA backends alone, median of repeats):\n")
    print("| shape | implementation | forward ms | backward ms | forward + backward |")
    print("|---|---|---:|---:|---:|")
    if len(ours) == 2:
        f, b = ours["attention_forward"], ours["attention_backward"]
        print(f"| gpt2 B=32 | kintsugi | {f:.2f} | {b:.2f} | {f + b:.2f} |")
    for r in peers:
        if "error" in r:
            print(f"| {r['shape']} | PyTorch {r['backend']} | refused: {r['error']} | | |")
        else:
            print(f"| {r['shape']} | PyTorch {r['backend']} | {r['forward_ms']:.2f} | "
                  f"{r['backward_ms']:.2f} | {r['forward_ms'] + r['backward_ms']:.2f} |")
    print()

# The planner's prediction of the step beside the measured one.
for model, batch in (("gpt2", 32), ("gpt2-xl", 8)):
    p, m = load(f"plan_{model}_b{batch}"), load(f"kintsugi_{model}_b{batch}")
    if p and p.get("layouts") and m:
        predicted = 1e3 * p["layouts"][0]["step_seconds"]["total"]
        print(f"plan --cluster local --device cuda, {model} B={batch}: predicted "
              f"{predicted:.1f} ms, measured {m['ms_per_step']:.1f} ms "
              f"({100 * (predicted / m['ms_per_step'] - 1):+.1f}%)\n")
EOF
echo
cat "$out/results.md"
[[ $failures -eq 0 ]] || { echo "gpu_check: $failures step(s) failed (logs in $out)"; exit 1; }
