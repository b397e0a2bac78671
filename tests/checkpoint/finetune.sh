#!/usr/bin/env bash
# Fine-tuning from a kintsugi run (docs/checkpoints.md "Fine-tuning from a kintsugi run"): a
# serial run saves model/ and a checkpoint of its last step; a serial fine-tune from model/ and
# a fine-tune in another layout from the training checkpoint (the same f32 weights) train the
# same losses and end with the same weights (relative 1e-5). Both start at step 0 with a fresh
# optimizer and schedule: their first step has the learning rate of a fresh run's first step,
# and their first checkpoint counts only their own optimizer steps.
# Usage: finetune.sh KINTSUGI CHECK_RUN OUT_DIR "RANKS [layout flags]" [common flags...]
set -euo pipefail
kintsugi="$1" check="$2" out="$3" layout="$4"
shift 4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/finetune"
rm -rf "$dir" && mkdir -p "$dir"
read -r -a l <<<"$layout"
"$kintsugi" train "$@" --save-every 4 --out "$dir/base" >/dev/null
ft=(--set train.steps=3 --set train.lr=3e-3 --save-every 2)
"$kintsugi" train "$@" "${ft[@]}" --init-from "$dir/base/model" --out "$dir/serial" \
  | tee "$dir/serial.log"
grep -q "initial weights from .*base/model (weights only: step 0" "$dir/serial.log"
mpirun -q -np "${l[0]}" --oversubscribe --bind-to none "$kintsugi" train "${l[@]:1}" "$@" \
  "${ft[@]}" --init-from "$dir/base/checkpoints/step-00000004" --out "$dir/sharded" >/dev/null
"$check" compare "$dir/serial" "$dir/sharded" 1e-5
# Fresh state: steps 1..3 (not 5..7), the first step's learning rate that of a fresh run with
# the same settings (warm-up restarts), and the checkpoint of step 2 counts 2 optimizer steps.
"$kintsugi" train "$@" "${ft[@]}" --set train.steps=1 --out "$dir/fresh" >/dev/null
# The first training step's line (a fine-tune's metrics begin with the step-0 evaluation).
first() {
  python3 -c 'import json,sys; print(next((m["step"], m["lr"]) for m in map(json.loads, open(sys.argv[1])) if "lr" in m))' \
    "$1/metrics.jsonl"
}
finetuned=$(first "$dir/serial") fresh=$(first "$dir/fresh")
echo "first step (fine-tune): $finetuned; (fresh run): $fresh"
[[ -n "$finetuned" && "$finetuned" == "$fresh" ]]
python3 - "$dir/serial/checkpoints/step-00000002/manifest.json" "$dir/base/model/manifest.json" <<'PY'
import json, sys
m, base = (json.load(open(path)) for path in sys.argv[1:])
assert m["step"] == 2 and m["optimizer_steps"] == 2, (m["step"], m["optimizer_steps"])
assert m["tokenizer"] == base["tokenizer"] and m["tokenizer"]["vocab_size"] > 0, m.get("tokenizer")
PY
echo "fine-tune: serial and ${l[*]} agree; fresh optimizer state and schedule"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
