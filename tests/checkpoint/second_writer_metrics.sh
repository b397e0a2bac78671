#!/usr/bin/env bash
# A run's metrics file is its own wherever it lies: while a run writes --metrics FILE outside
# its --out, a second job with another --out and the same FILE (and --overwrite, which empties
# the metrics file of the run it replaces) is refused at once with one line, and FILE keeps the
# first run's lines; the first run goes on and stops cleanly (docs/checkpoints.md).
# Usage: second_writer_metrics.sh KINTSUGI OUT_DIR [flags...]
set -uo pipefail
kintsugi="$1" out="$2"
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1
dir="$out/second_writer_metrics"
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }
metrics="$dir/shared/metrics.jsonl"

KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:100 "$kintsugi" train "$@" --set train.steps=100000 \
  --out "$dir/first" --metrics "$metrics" >"$dir/first.log" 2>&1 &
first=$!
trap 'kill -KILL $first 2>/dev/null' EXIT
for _ in $(seq 600); do
  grep -qs '"loss":' "$metrics" && break
  sleep 0.1
done
grep -qs '"loss":' "$metrics" || die "the first run trained no step: $(cat "$dir/first.log")"
lines=$(grep -c '"loss":' "$metrics" || true)

"$here/../cli/expect_error.sh" "--metrics $metrics is in use by another training run" \
  "$kintsugi" train "$@" --out "$dir/second" --metrics "$metrics" --overwrite || exit 1
(($(grep -c '"loss":' "$metrics" || true) >= lines)) || die "the second job emptied the first run's metrics"

kill -TERM "$first"
wait "$first" || die "the first run exited with status $?: $(cat "$dir/first.log")"
grep -q "stopped by a signal after step" "$dir/first.log" || die "the first run did not save"
(($(grep -c '"loss":' "$metrics" || true) >= lines)) || die "the first run's metrics lost lines"
trap - EXIT
echo "the second job was refused while the first wrote the metrics file; it kept its lines"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
