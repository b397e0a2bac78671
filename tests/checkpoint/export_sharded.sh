#!/usr/bin/env bash
# Export from a training checkpoint written by 8 ranks (tp 2 x pp 2 x dp 2: pieces from several
# shard files) gives the same bytes as export from the same run's gathered model/, and passes
# the independent reader.
# Usage: export_sharded.sh KINTSUGI RUN_DIR OUT_DIR
set -euo pipefail
kintsugi="$1" run="$2" out="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$out/export_sharded"
"$kintsugi" export --checkpoint "$run/checkpoints/step-00000004" --out "$out/export_sharded/a/model.safetensors"
"$kintsugi" export --checkpoint "$run/model" --out "$out/export_sharded/b/model.safetensors"
cmp "$out/export_sharded/a/model.safetensors" "$out/export_sharded/b/model.safetensors"
python3 "$here/verify_hf_export.py" "$out/export_sharded/a/model.safetensors" "$run/model"
