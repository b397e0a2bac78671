#!/usr/bin/env bash
# `kintsugi eval` of a saved model under each LAYOUT prints the loss one process prints for the
# same windows, and the JSON names the layout asked for (every `--flag value` of it). A layout
# is "RANKS FLAGS...": context parallelism (cp holds no weights of its own), expert parallelism
# with fewer windows than some ranks (they run the ep group's lockstep forwards), ...
# Usage: eval_layouts.sh KINTSUGI MODEL_DIR DATA WINDOWS LAYOUT...
set -euo pipefail
kintsugi="$1" model="$2" data="$3" windows="$4"
shift 4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(eval --checkpoint "$model" --data "$data" --windows "$windows" --json)
results=("$("$kintsugi" "${common[@]}" | tail -1)")
for layout in "$@"; do
  read -r ranks flags <<<"$layout"
  # shellcheck disable=SC2086 # the layout's flags are words
  results+=("$(mpirun -q -np "$ranks" --oversubscribe --bind-to none "$kintsugi" "${common[@]}" \
    $flags | tail -1)")
done
python3 - "$@" -- "${results[@]}" <<'PY'
import json, sys
split = sys.argv.index("--")
layouts, results = sys.argv[1:split], [json.loads(t) for t in sys.argv[split + 1:]]
serial = results[0]
for layout, got in zip(layouts, results[1:]):
    words = layout.split()[1:]
    for flag, value in zip(words[::2], words[1::2]):
        key = flag.lstrip("-").replace("-", "_")
        have = got["layout"].get(key)
        if str(have) != value:
            sys.exit(f"FAIL: {layout}: the JSON layout's {key} is {have}, not {value}")
    print("serial", serial["loss"], layout, got["loss"])
    if abs(serial["loss"] - got["loss"]) > 1e-6 * abs(serial["loss"]):
        sys.exit(1)
PY
