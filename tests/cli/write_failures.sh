#!/usr/bin/env bash
# Output that cannot be written ends a run with one clear line instead of passing silently.
#   metrics  --metrics /dev/full (a full disk): the job saves the step it finished, then fails
#            naming the file
#   plot     <out>/loss.svg is a directory: the run fails naming the plot
#   log      a log redirected to a file keeps its lines when the process is killed mid-step
# Usage: write_failures.sh CASE KINTSUGI OUT_DIR [flags...]
set -uo pipefail
case="$1" kintsugi="$2" out="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
export OMP_NUM_THREADS=1
dir="$out/write_failure_$case"
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }
case "$case" in
  metrics)
    "$here/expect_error.sh" "cannot write the metrics file /dev/full .*stopped after step 1" \
      "$kintsugi" train "$@" --metrics /dev/full --out "$dir/run" || exit 1
    test -f "$dir/run/checkpoints/step-00000001/manifest.json" || die "step 1 was not saved"
    ;;
  plot)
    mkdir -p "$dir/run/loss.svg"
    "$here/expect_error.sh" "cannot write the loss plot .*loss.svg" \
      "$kintsugi" train "$@" --out "$dir/run" || exit 1
    ;;
  log)
    KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:1000 "$kintsugi" train "$@" --out "$dir/run" \
      >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do [[ -f "$dir/run/run.json" ]] && break; sleep 0.1; done
    sleep 0.5
    kill -KILL "$pid"
    wait "$pid"
    grep -q "^kintsugi train |" "$dir/log" || die "the killed run's log lost its lines: $(cat "$dir/log")"
    echo "the log of the killed run kept its $(wc -l <"$dir/log") lines"
    ;;
  *) die "unknown case $case" ;;
esac
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
