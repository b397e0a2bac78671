#!/usr/bin/env bash
# tokens_seen counts each step at the global batch it had: a run of batch 8 resumed at step 2
# with batch 16 has seen 2*8 + 16 sequences after step 3 (not 3*16), in metrics.jsonl and in
# the checkpoint it writes (which a second resume continues from).
# Usage: tokens_seen.sh KINTSUGI OUT_DIR [common flags: the micro run, global batch 8, seq 32]
set -euo pipefail
kintsugi="$1" out="$2"
shift 2
dir="$out/tokens_seen"
rm -rf "$dir"
"$kintsugi" train "$@" --save-every 2 --out "$dir/first" >/dev/null
"$kintsugi" train "$@" --set train.global_batch=16 --set train.steps=6 --save-every 2 \
  --resume "$dir/first/checkpoints/step-00000002" --out "$dir/second" >/dev/null
"$kintsugi" train "$@" --set train.global_batch=16 --set train.steps=7 \
  --resume "$dir/second/checkpoints/step-00000004" --out "$dir/third" >/dev/null
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def seen(run):
    out = {}
    for line in open(f"{d}/{run}/metrics.jsonl"):
        r = json.loads(line)
        if "tokens_seen" in r:
            out[r["step"]] = r["tokens_seen"]
    return out
seq = 32
want = {3: (2 * 8 + 16) * seq, 4: (2 * 8 + 2 * 16) * seq, 5: (2 * 8 + 3 * 16) * seq}
second, third = seen("second"), seen("third")
got = {3: second.get(3), 4: second.get(4), 5: third.get(5)}
if got != want:
    sys.exit(f"tokens_seen after a batch change: got {got}, want {want}")
print("tokens_seen", got)
PY
"$(dirname "${BASH_SOURCE[0]}")/../support/remove_on_pass.sh" "$dir"
