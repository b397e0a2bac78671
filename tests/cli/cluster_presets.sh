#!/usr/bin/env bash
# Cluster presets are compiled into the program (cmake/ClusterPresets.cmake): they work from
# any working directory and in a copy of the binary outside any checkout, and are the
# checkout's files as the build read them. A file of the user's still comes first.
# Usage: cluster_presets.sh KINTSUGI SOURCE_DIR
set -euo pipefail
kintsugi="$1" source="$2"
elsewhere="$(mktemp -d)"
trap 'rm -rf "$elsewhere"' EXIT
cp "$kintsugi" "$elsewhere/kintsugi"
cd "$elsewhere"
for preset in "$source"/configs/clusters/*.toml; do
  name="$(basename "$preset" .toml)"
  out="$("$elsewhere/kintsugi" plan --model gpt-tiny --cluster "$name" --top 1)" ||
    { echo "FAIL: a copy outside the checkout refused $name: $out"; exit 1; }
  grep -q "devices of $name (configs/clusters/$name.toml)" <<<"$out" ||
    { echo "FAIL: $name: $out"; exit 1; }
done
# The user's own file named like a preset is the file, not the preset.
sed 's/^memory_gb = 96$/memory_gb = 48/' "$source/configs/clusters/gaudi2.toml" > gaudi2
out="$("$elsewhere/kintsugi" plan --model gpt-tiny --cluster gaudi2 --top 1)"
grep -q "fit in 48 GB per device" <<<"$out" || { echo "FAIL: the file gaudi2: $out"; exit 1; }
if msg="$("$elsewhere/kintsugi" plan --model gpt-tiny --cluster dgx-h200 2>&1)"; then
  echo "FAIL: an unknown cluster was accepted: $msg"; exit 1
fi
grep -q 'unknown cluster "dgx-h200": no such file, and not a preset (dgx-a100-80gb, dgx-h100, frontier, gaudi2, perlmutter, local)' <<<"$msg" ||
  { echo "FAIL: $msg"; exit 1; }
echo "cluster presets: compiled in, from anywhere; a file of the user's comes first"
