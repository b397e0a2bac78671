#!/usr/bin/env bash
# One writer per output directory: while a run trains into --out, a second job (under mpirun)
# with the same --out refuses at once with one line naming the host and pid of the first, and
# writes nothing there; the first run goes on and stops cleanly.
# Usage: second_writer.sh KINTSUGI OUT_DIR [flags...]
set -uo pipefail
kintsugi="$1" out="$2"
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/second_writer"
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*"; exit 1; }

KINTSUGI_TEST_SLOW_MICRO_BATCHES=train:100 "$kintsugi" train "$@" --set train.steps=100000 \
  --out "$dir/run" >"$dir/first.log" 2>&1 &
first=$!
trap 'kill -KILL $first 2>/dev/null' EXIT
for _ in $(seq 600); do
  grep -qs '"loss":' "$dir/run/metrics.jsonl" && break
  sleep 0.1
done
grep -qs '"loss":' "$dir/run/metrics.jsonl" || die "the first run trained no step: $(cat "$dir/first.log")"
before=$(md5sum <"$dir/run/run.json")

mpirun -q -np 2 --oversubscribe --bind-to none "$kintsugi" train "$@" --dp 2 --out "$dir/run" \
  >"$dir/second.out" 2>"$dir/second.err"
status=$?
cat "$dir/second.err"
((status != 0)) || die "the second job exited 0"
expected="--out $dir/run is in use by another training run (host $(hostname) pid $first)"
grep -qF -- "$expected" "$dir/second.err" || die "expected: $expected"
(($(grep -c "in use" "$dir/second.err") == 1)) || die "the refusal was printed more than once"
[[ "$(md5sum <"$dir/run/run.json")" == "$before" ]] || die "the second job rewrote run.json"

kill -TERM "$first"
wait "$first" || die "the first run exited with status $?: $(cat "$dir/first.log")"
grep -q "stopped by a signal after step" "$dir/first.log" || die "the first run did not save"
trap - EXIT
echo "the second job was refused while the first ran; the first stopped cleanly"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
