#!/usr/bin/env bash
# Cluster presets come from the checkout (or installed share/kintsugi) the binary belongs to,
# from any working directory, and never from a path compiled into it: a copy of the binary
# outside any checkout knows none until a share/kintsugi/clusters sits beside its bin/.
# Usage: cluster_presets.sh KINTSUGI SOURCE_DIR
set -euo pipefail
kintsugi="$1" source="$2"
cd /
out="$("$kintsugi" plan --model gpt-tiny --cluster gaudi2 --top 1)"
grep -q "configs/clusters/gaudi2.toml" <<<"$out" || { echo "FAIL: from /: $out"; exit 1; }
elsewhere="$(mktemp -d)"
trap 'rm -rf "$elsewhere"' EXIT
mkdir -p "$elsewhere/bin"
cp "$kintsugi" "$elsewhere/bin/kintsugi"
if msg="$("$elsewhere/bin/kintsugi" plan --model gpt-tiny --cluster gaudi2 2>&1)"; then
  echo "FAIL: a copy outside the checkout found a preset: $msg"
  exit 1
fi
grep -q 'unknown cluster "gaudi2"' <<<"$msg" || { echo "FAIL: $msg"; exit 1; }
mkdir -p "$elsewhere/share/kintsugi"
cp -r "$source/configs/clusters" "$elsewhere/share/kintsugi/"
out="$("$elsewhere/bin/kintsugi" plan --model gpt-tiny --cluster gaudi2 --top 1)"
grep -q "$elsewhere/share/kintsugi/clusters/gaudi2.toml" <<<"$out" ||
  { echo "FAIL: installed layout: $out"; exit 1; }
echo "cluster presets: from the checkout, and from share/kintsugi beside bin/"
