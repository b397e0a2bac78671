#!/usr/bin/env bash
# `plan --cluster local --device cpu` is the local cluster of before --device existed: the same
# table, text and JSON, as without the flag, and no notes of a measured device.
# Usage: plan_device_cpu.sh KINTSUGI CONFIG
set -euo pipefail
kintsugi="$1"
config="$2"
args=(plan --config "$config" --cluster local --ranks 2 --top 3)
without="$("$kintsugi" "${args[@]}")"
with="$("$kintsugi" "${args[@]}" --device cpu)"
if [[ "$with" != "$without" ]]; then
  echo "--device cpu changed the plan:"
  diff <(echo "$without") <(echo "$with") || true
  exit 1
fi
if ! grep -q "devices of local (this machine (" <<<"$with"; then
  echo "not the CPU's local cluster:"
  echo "$with"
  exit 1
fi
json="$("$kintsugi" "${args[@]}" --device cpu --json)"
if grep -q "^note: memory\|cluster_notes" <<<"$with$json"; then
  echo "--device cpu printed the notes of a measured device"
  exit 1
fi
echo "ok: --device cpu plans the CPU's local cluster as before"
