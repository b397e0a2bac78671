#!/usr/bin/env bash
# `kintsugi eval` equals train's validation loss for the same windows: a run's last val_loss
# (train.eval_sequences = WINDOWS windows of its validation file) against
# eval of its saved model and of its last training checkpoint, as one process and under mpirun
# in other layouts; then every window of the file, in text.
# Usage: eval.sh KINTSUGI RUN_DIR VAL_FILE WINDOWS TOKENIZER_DIR VAL_TEXT (the text VAL_FILE holds)
set -euo pipefail
kintsugi="$1" run="$2" val="$3" windows="$4" tokenizer="$5" val_text="$6"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
want="$(tail -n 1 "$run/metrics.jsonl")"
ckpt="$(ls -d "$run"/checkpoints/step-* | tail -n 1)"

check() {  # RTOL LABEL COMMAND...: the command prints eval's JSON
  local rtol="$1" label="$2"
  shift 2
  local got
  got="$("$@" --data "$val" --windows "$windows" --json | tail -n 1)"
  python3 - "$want" "$got" "$rtol" "$label" "$windows" <<'PY'
import json, math, sys
want, got = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rtol, label = float(sys.argv[3]), sys.argv[4]
assert got["windows"] == int(sys.argv[5]), got
ok = math.isclose(got["loss"], want["val_loss"], rel_tol=rtol, abs_tol=0)
ok = ok and math.isclose(got["perplexity"], math.exp(got["loss"]), rel_tol=1e-12)
print(f"{label}: eval {got['loss']!r}, train's val_loss {want['val_loss']!r} (step {want['step']})")
sys.exit(0 if ok else 1)
PY
}

mpi() { mpirun -q -np "$1" --oversubscribe --bind-to none "${@:2}"; }
check 0 "serial, model/" "$kintsugi" eval --checkpoint "$run/model"
check 0 "serial, $(basename "$ckpt")" "$kintsugi" eval --checkpoint "$ckpt"
check 1e-5 "tp 2, training checkpoint" mpi 2 "$kintsugi" eval --checkpoint "$ckpt" --tp 2
check 1e-5 "pp 2, model/" mpi 2 "$kintsugi" eval --checkpoint "$run/model" --pp 2
check 1e-5 "dp 2 ZeRO-3, training checkpoint" mpi 2 "$kintsugi" eval --checkpoint "$ckpt" --dp 2 \
  --zero 3

# Every window of a small file (none overlapping: (tokens - 1) / seq_len of them), as text.
small="$run/eval-small"
head -c 8000 "$val_text" >"$small.txt"
"$kintsugi" data tokenize --tokenizer "$tokenizer" --out "$small.bin" "$small.txt" >/dev/null
tokens="$("$kintsugi" data info "$small.bin" | grep -Eo "[0-9]+ tokens" | grep -Eo "[0-9]+")"
out="$("$kintsugi" eval --checkpoint "$run/model" --data "$small.bin")"
echo "$out"
grep -Eq "^loss [0-9.]+ \| perplexity [0-9.]+" <<<"$out"
grep -q "| $(((tokens - 1) / 32)) windows of 32 tokens" <<<"$out" \
  || { echo "FAIL: not every window of $tokens tokens"; exit 1; }
