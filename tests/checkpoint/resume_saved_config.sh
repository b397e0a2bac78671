#!/usr/bin/env bash
# The run's configuration is saved as <out>/config.toml (docs/checkpoints.md "The saved
# configuration"): it loads as a config; `--resume auto` without --config trains on with it (the
# learning rate and schedule the first run was given, no --set retyped) and lists the one key
# it changes; a resume with --config lists every key that differs from the saved one, seq_len
# and global batch included; a run whose directory has no config.toml says it takes the defaults;
# --overwrite removes it.
# Usage: resume_saved_config.sh KINTSUGI OUT_DIR [train flags with --config...]
set -euo pipefail
kintsugi="$1" out="$2"
shift 2
export OMP_NUM_THREADS=1
dir="$out/resume_saved_config"
rm -rf "$dir"
first=(--set train.steps=2 --save-every 2 --set train.lr=1e-3 --set train.min_lr=1e-4
       --set train.lr_schedule=linear --set train.warmup_steps=1)
"$kintsugi" train "$@" "${first[@]}" --out "$dir/run" >/dev/null
saved="$dir/run/config.toml"
grep -q "^lr = 0.001$" "$saved" && grep -q "^lr_schedule = 'linear'$" "$saved"
grep -q "^dp = 0$" "$saved"  # as given: any rank count
# It is a config: a run from it alone starts with the same configuration.
"$kintsugi" train --config "$saved" --set train.steps=1 --set train.save_checkpoint=false \
  --out "$dir/copy" >/dev/null
diff <(grep -v "^steps = \|^save_checkpoint = " "$saved") \
     <(grep -v "^steps = \|^save_checkpoint = " "$dir/copy/config.toml")

# Resumed without --config: the saved lr and schedule go on; one line for the key changed.
"$kintsugi" train --out "$dir/run" --resume auto --set train.steps=4 >"$dir/auto.log"
grep -q "resumed from .*step-00000002 at step 2" "$dir/auto.log"
grep -q "^changed on resume: train.steps = 4 (was 2 in .*run/config.toml)$" "$dir/auto.log"
[[ $(grep -c "^changed on resume" "$dir/auto.log") == 1 ]] || { cat "$dir/auto.log"; exit 1; }
# linear from 1e-3 after the 1-step warm-up to 1e-4 at step 4: step 3 trains at 4e-4.
python3 - "$dir/run/metrics.jsonl" <<'PY'
import json, sys
lr = {m["step"]: m["lr"] for m in map(json.loads, open(sys.argv[1])) if "lr" in m}
assert abs(lr[3] - 4e-4) < 1e-12 and abs(lr[4] - 1e-4) < 1e-12, lr
PY
grep -q "^steps = 4$" "$saved"  # the resumed run's configuration is the one saved now

# With --config: that file as given, and every key that differs from the saved one listed.
"$kintsugi" train "$@" --set train.steps=5 --set model.seq_len=16 --set train.global_batch=4 \
  --out "$dir/run" --resume auto >"$dir/config.log"
for line in "train.steps = 5 (was 4" "train.lr = 0.003 (was 0.001" \
            "train.min_lr = 0.0003 (was 0.0001" "train.lr_schedule = \"cosine\" (was \"linear\"" \
            "model.seq_len = 16 (was 32" "train.global_batch = 4 (was 8"; do
  grep -qF "changed on resume: $line in " "$dir/config.log" ||
    { echo "missing: $line"; cat "$dir/config.log"; exit 1; }
done
[[ $(grep -c "^changed on resume" "$dir/config.log") == 7 ]] || { cat "$dir/config.log"; exit 1; }

# A run directory without config.toml (an older build's): the defaults and the flags, said in
# one note (the flags here give the run's model, as they had to before).
[[ $1 == --config ]]
rm "$saved"
"$kintsugi" train "${@:3}" --set train.steps=6 --out "$dir/run" --resume auto >"$dir/none.log"
grep -q "^note: .*run/config.toml does not exist (builds before this one did not write it): this run takes the defaults" "$dir/none.log" ||
  { cat "$dir/none.log"; exit 1; }
# --overwrite removes it with the rest of the earlier run (and the new run writes its own).
"$kintsugi" train "$@" --set train.steps=1 --set train.save_checkpoint=false --out "$dir/run" \
  --overwrite >/dev/null
grep -q "^steps = 1$" "$saved"
echo "saved configuration: written, resumed from, changes listed"
