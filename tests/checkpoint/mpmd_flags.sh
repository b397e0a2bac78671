#!/usr/bin/env bash
# The ranks of a job agree on where they write and what they continue from before anything is
# removed: an MPMD launch whose ranks were given different --out, or --overwrite on one and
# --resume on another, is refused with one line naming the flag, and the earlier run in the
# output directory is left whole (rank 0 alone would have removed it, and the ranks would have
# written the shards of one checkpoint into two directories).
# Usage: mpmd_flags.sh KINTSUGI OUT_DIR [flags...]
set -uo pipefail
kintsugi="$1" out="$2"
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir="$out/mpmd_flags"
rm -rf "$dir" && mkdir -p "$dir/run"
die() { echo "FAIL: $*"; exit 1; }
earlier='{"step": 1, "loss": 10.0}'
echo "$earlier" >"$dir/run/metrics.jsonl"  # an earlier run's history
# `launch`: mpirun with rank 0's flags and rank 1's ("FLAG VALUE ...", after the shared ones).
mpmd() {
  local -a zero one
  read -ra zero <<<"$1"
  read -ra one <<<"$2"
  launch=(mpirun -q --oversubscribe --bind-to none -np 1 "$kintsugi" train "${flags[@]}"
          "${zero[@]}" : -np 1 "$kintsugi" train "${flags[@]}" "${one[@]}")
}
flags=("$@")

mpmd "--out $dir/run --overwrite" "--out $dir/other --overwrite"
"$here/../cli/expect_error.sh" \
  "ranks of this job were given different configurations: --out = \"$dir/run\" \\(rank 0\\) vs \"$dir/other\" \\(rank 1\\)" \
  "${launch[@]}" || exit 1
[[ "$(cat "$dir/run/metrics.jsonl")" == "$earlier" ]] || die "--out differed, yet the earlier run was removed"

mpmd "--out $dir/run --overwrite" "--out $dir/run --resume auto"
"$here/../cli/expect_error.sh" \
  "ranks of this job were given different configurations: --overwrite = true \\(rank 0\\) vs false \\(rank 1\\)" \
  "${launch[@]}" || exit 1
[[ "$(cat "$dir/run/metrics.jsonl")" == "$earlier" ]] || die "--overwrite differed, yet the earlier run was removed"
echo "both launches were refused before anything was removed"
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
