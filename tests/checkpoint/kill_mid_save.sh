#!/usr/bin/env bash
# A job killed in the middle of writing a checkpoint (one rank dies after writing its shard of
# step 4, before the checkpoint is complete) leaves the previous checkpoint (step 2) intact:
# `latest` still names it, the half-written one keeps its ".partial" name, and `--resume auto`
# continues from step 2 bit for bit like a run that never stopped.
# Usage: kill_mid_save.sh KINTSUGI CHECK_RUN OUT_DIR NAME RANKS [flags...]
set -uo pipefail
kintsugi="$1" check="$2" out="$3" name="$4" ranks="$5"
shift 5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/$name"
rm -rf "$dir"
launch() {
  if ((ranks == 1)); then "$kintsugi" train "$@"; else
    mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" train "$@"; fi
}
die() { echo "FAIL: $*"; exit 1; }

launch "$@" --out "$dir/full" >/dev/null || die "the reference run failed"
export KINTSUGI_TEST_DIE_IN_SAVE="$((ranks - 1)):4"  # the last rank dies in the save of step 4
launch "$@" --save-every 2 --out "$dir/run" >/dev/null 2>&1
status=$?
unset KINTSUGI_TEST_DIE_IN_SAVE
((status != 0)) || die "the job with a rank dying mid-save succeeded"
ckpt="$dir/run/checkpoints"
test -f "$ckpt/step-00000002/manifest.json" || die "the previous checkpoint is gone"
test -d "$ckpt/step-00000004.partial" || die "no half-written checkpoint: did the rank die in the save?"
test ! -e "$ckpt/step-00000004" || die "an incomplete checkpoint got its final name"
[[ "$(cat "$ckpt/latest")" == step-00000002 ]] || die "latest names $(cat "$ckpt/latest")"
echo "killed mid-save: step-00000002 complete, step-00000004.partial left, latest = step-00000002"

launch "$@" --save-every 2 --resume auto --out "$dir/run" | tee "$dir/resume.log" || die "resume failed"
grep -q "resumed from .*step-00000002 at step 2" "$dir/resume.log" || die "did not resume from step 2"
test ! -e "$ckpt/step-00000004.partial" || die "the half-written checkpoint was not cleaned up"
"$check" resumed "$dir/full" "$dir/run" 0 || exit 1
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
