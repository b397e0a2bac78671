#!/usr/bin/env bash
# Checks kintsugi on one NVIDIA GPU in one go: the GPU tests, multi-rank layouts sharing the GPU
# through MPI (bench/gpu_layouts.sh), the GEMM rate, exports loaded by transformers
# (bench/transformers_check.sh), and GPT-2 124M
# (B=32, T=1024) and GPT-2 1.5B (B=8, T=1024) training steps in bf16, each side by side with the
# PyTorch peer (bench/pytorch/gpt2_step_cuda.py, eager and torch.compile) run in the same go.
# Logs, JSON results and results.md (the table, printed last) go to $OUT (default
# ./gpu_check_out). Runs from an unpacked bundle (scripts/bundle.sh) or from a source tree with
# a CUDA build (KINTSUGI_BUILD, default build-cuda/ then build/).
#
#   bash bench/gpu_check.sh                   everything
#   GPU_CHECK_QUICK=1 bash bench/gpu_check.sh  fewer timed steps (a smoke run)
#   GPU_CHECK_SKIP="layouts compiled"          parts left out: tests, layouts, gemm,
#                                              transformers, kintsugi, profile, cuda_core,
#                                              generic_kernels, eager, compiled
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
wanted layouts && run gpu_layouts bash "$here/bench/gpu_layouts.sh" "$kintsugi" "$check_run" "$out/layouts"
wanted gemm && run gemm_bf16 "$kintsugi" bench gemm --device cuda --dtype bf16 --size 8192 --json

# Exports loaded by transformers itself (AutoTokenizer, AutoModelForCausalLM): ids and loss
# equal kintsugi's, for GPT-2, Llama and BLOOM (needs the fetched data: scripts/fetch_data.sh).
if ! wanted transformers; then
  :
elif "$python" -c 'import transformers' 2>/dev/null && [[ -f "$here/data/brown/llama2/val.bin" ]]; then
  run transformers_check env PYTHON="$python" bash "$here/bench/transformers_check.sh" \
    "$kintsugi" "$out/transformers"
else
  echo "transformers check skipped: no transformers in $python or no data/ (scripts/fetch_data.sh)" \
    >"$out/transformers_check.log"
fi

# model batch: kintsugi, then PyTorch eager and compiled, on the same GPU in the same go
# (compiled last: torch.compile spends minutes compiling before it measures).
# The profile (time per op), the CUDA-core attention kernels (the tensor-core ones turned off)
# and the generic memory-bound kernels (KINTSUGI_TYPED_KERNELS=0: the step and its profile) are
# for GPT-2 124M only.
for mode in kintsugi profile cuda_core generic_kernels eager compiled; do
  wanted $mode || continue
  for case in "gpt2 32" "gpt2-xl 8"; do
    read -r model batch <<<"$case"
    step=("$kintsugi" bench step --device cuda --precision bf16 --model "$model" --batch "$batch"
          --seq 1024 --steps "$steps" --warmup "$warmup")
    case $mode in
      kintsugi) run "kintsugi_${model}_b$batch" "${step[@]}" --json; continue ;;
      profile | cuda_core | generic_kernels) [[ $model == gpt2 ]] || continue ;;&
      profile) run "kintsugi_${model}_b${batch}_profile" "${step[@]}" --profile; continue ;;
      cuda_core)
        run "kintsugi_cuda_core_${model}_b$batch" env KINTSUGI_TENSOR_CORE_ATTENTION=0 "${step[@]}" --json
        continue ;;
      generic_kernels)
        run "kintsugi_generic_kernels_${model}_b$batch" env KINTSUGI_TYPED_KERNELS=0 "${step[@]}" --json
        run "kintsugi_generic_kernels_${model}_b${batch}_profile" env KINTSUGI_TYPED_KERNELS=0 \
          "${step[@]}" --profile
        continue ;;
    esac
    flag=""
    [[ $mode == compiled ]] && flag="--compile"
    run "pytorch_${mode}_${model}_b$batch" "$python" "$here/bench/pytorch/gpt2_step_cuda.py" \
      --model "$model" --batch "$batch" --seq 1024 --steps "$steps" --warmup "$warmup" \
      --peak-tflops "$peak" $flag --json
  done
done

"$python" - "$out" "$peak" >"$out/results.md" <<'EOF'
import json, pathlib, sys, xml.etree.ElementTree as ET
out, peak = pathlib.Path(sys.argv[1]), float(sys.argv[2])
def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
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
print(f"MFU: model FLOPs (6N + 12 L T d per token) over a dense bf16 peak of {peak:.0f} TFLOP/s\n")
print("| model | B x T | implementation | ms/step | tokens/s | TFLOP/s | MFU | peak memory GiB |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for model, batch in (("gpt2", 32), ("gpt2-xl", 8)):
    for impl, name in (("kintsugi (bf16)", f"kintsugi_{model}_b{batch}"),
                       ("kintsugi, CUDA-core attention", f"kintsugi_cuda_core_{model}_b{batch}"),
                       ("kintsugi, generic memory-bound kernels",
                        f"kintsugi_generic_kernels_{model}_b{batch}"),
                       ("PyTorch eager", f"pytorch_eager_{model}_b{batch}"),
                       ("PyTorch compiled", f"pytorch_compiled_{model}_b{batch}")):
        r = load(name)
        if not r:
            if (out / f"{name}.rc").exists():
                print(f"| {model} | {batch} x 1024 | {impl} | failed: {name}.log | | | | |")
            continue
        tflops = r.get("tflops", r.get("gflops", 0) / 1e3)
        print(f"| {model} | {batch} x 1024 | {impl} | {r['ms_per_step']:.1f} | "
              f"{r['tokens_per_s']:.0f} | {tflops:.1f} | {100 * tflops / peak:.1f}% | "
              f"{r['peak_memory_bytes'] / 2**30:.1f} |")
EOF
echo
cat "$out/results.md"
[[ $failures -eq 0 ]] || { echo "gpu_check: $failures step(s) failed (logs in $out)"; exit 1; }
