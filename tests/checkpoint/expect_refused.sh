#!/usr/bin/env bash
# A damaged or mismatched checkpoint is refused before any training state exists: one clear
# line, non-zero exit. Copies a good checkpoint, breaks the copy in one way, resumes from it.
# Usage: [RANKS=n] expect_refused.sh KIND PATTERN KINTSUGI GOOD_CHECKPOINT OUT_DIR [flags...]
#   (RANKS > 1: under mpirun, where the ranks agree and one of them prints the line)
#   KIND: corrupt (a flipped bit), truncated, no-shard (a shard file removed), no-piece (a piece
#         dropped from the manifest), no-manifest,
#         other-model (flags describe another model), other-optimizer (flags name another
#         train.optimizer), past-the-end (flags end training before
#         the checkpoint's step), manifest (EDIT="key.path=JSON" sets that manifest field)
set -euo pipefail
kind="$1" pattern="$2" kintsugi="$3" good="$4" out="$5"
shift 5
here="$(cd "$(dirname "$0")" && pwd)"
bad="$out/refused-$kind${EDIT:+-${EDIT//[^a-z0-9_]/_}}${RANKS:+-np$RANKS}"
rm -rf "$bad"
mkdir -p "$out"
cp -r "$good" "$bad"
shard="$(ls "$bad"/rank-*.bin | head -1)"
case "$kind" in
  corrupt) python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(100); b = f.read(1); f.seek(100); f.write(bytes([b[0] ^ 1]))' "$shard" ;;
  truncated) truncate -s -4 "$shard" ;;
  no-shard) rm "$shard" ;;
  no-manifest) rm "$bad/manifest.json" ;;
  no-piece) python3 -c 'import json, sys; p = sys.argv[1]; m = json.load(open(p)); m["pieces"].pop(3); json.dump(m, open(p, "w"))' "$bad/manifest.json" ;;
  manifest) python3 -c 'import json, sys
p, (key, value) = sys.argv[1], sys.argv[2].split("=", 1)
m = json.load(open(p)); *path, last = key.split("."); d = m
for k in path: d = d[k]
d[last] = json.loads(value); json.dump(m, open(p, "w"))' "$bad/manifest.json" "$EDIT"
    ;;
  other-model | other-optimizer | past-the-end) ;;
  *) echo "unknown kind $kind"; exit 2 ;;
esac
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch=()
if ((${RANKS:-1} > 1)); then launch=(mpirun -q -np "$RANKS" --oversubscribe --bind-to none); fi
"$here/../cli/expect_error.sh" "$pattern" "${launch[@]}" "$kintsugi" train "$@" --resume "$bad" \
  --out "$bad.run"
