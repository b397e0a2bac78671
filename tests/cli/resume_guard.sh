#!/usr/bin/env bash
# Resume that cannot go wrong (docs/checkpoints.md): a second run into an output directory that
# holds an earlier run is refused unless it resumes or overwrites; --resume auto says only that it
# resumed; a resume that changes train.steps says how the schedule changed; loss.svg of a resumed
# run draws the whole run; --overwrite starts over cleanly.
# Usage: resume_guard.sh KINTSUGI EXPECT_ERROR OUT_DIR [train flags...]
set -euo pipefail
kintsugi="$1" expect_error="$2" dir="$3"
shift 3
export OMP_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }
points() {  # training-loss points drawn in an SVG (the first polyline)
  grep -m1 -o '<polyline[^>]*points="[^"]*"' "$1" | sed 's/.*points="//; s/"$//' | wc -w
}

"$kintsugi" train "$@" --save-every 2 --out "$dir/run" >"$dir/first.log"
cp "$dir/run/metrics.jsonl" "$dir/first-metrics.jsonl"
test "$(points "$dir/run/loss.svg")" -eq 4

# Again, as if by accident: refused, naming both ways on; nothing touched.
"$expect_error" "holds an earlier run .*--resume auto.*--overwrite" \
  "$kintsugi" train "$@" --save-every 2 --out "$dir/run"
cmp "$dir/run/metrics.jsonl" "$dir/first-metrics.jsonl" || die "the refused run wrote metrics"
test -d "$dir/run/checkpoints/step-00000004" || die "the refused run touched the checkpoints"

# Resume for longer: one message about resuming, a note about the schedule, the whole curve.
"$kintsugi" train "$@" --save-every 2 --resume auto --set train.steps=6 --out "$dir/run" \
  | tee "$dir/resumed.log"
grep -q "resumed from .*step-00000004 at step 4" "$dir/resumed.log" || die "no resume line"
if grep -q "no checkpoint" "$dir/resumed.log"; then
  die "a successful resume says 'no checkpoint'"
fi
grep -q "note: the learning-rate schedule differs .*train.steps 4 -> 6" "$dir/resumed.log" \
  || die "no note that train.steps changed the schedule"
test "$(grep -c '"loss":' "$dir/run/metrics.jsonl" || true)" -eq 6 || die "metrics.jsonl should hold 6 steps"
test "$(points "$dir/run/loss.svg")" -eq 6 || die "loss.svg should draw all 6 steps"

# --resume auto with nothing to resume says so; --overwrite and --resume exclude each other.
"$kintsugi" train "$@" --resume auto --out "$dir/fresh" >"$dir/fresh.log"
grep -q "no checkpoint under" "$dir/fresh.log" \
  || die "--resume auto without a checkpoint did not say so"
"$expect_error" "give only one of them" \
  "$kintsugi" train "$@" --resume auto --overwrite --out "$dir/run"

# Start over: the old checkpoints and metrics are gone, the new run's are there.
"$kintsugi" train "$@" --overwrite --out "$dir/run" >"$dir/overwrite.log"
test ! -e "$dir/run/checkpoints" || die "--overwrite kept the old checkpoints"
test "$(grep -c '"loss":' "$dir/run/metrics.jsonl" || true)" -eq 4 \
  || die "--overwrite: metrics.jsonl should hold 4 steps"
echo "ok"
