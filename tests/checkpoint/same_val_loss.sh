#!/usr/bin/env bash
# The validation loss a run ended with (TRAINED_LOG's `done:` line) is the one a run started from
# its export begins with (STARTED_LOG's step 0), to the printed digit: the exported model reads
# back as the same function, not only the same weights.
# Usage: same_val_loss.sh TRAINED_LOG STARTED_LOG
set -euo pipefail
final=$(sed -n 's/^done:.*val loss [0-9.]* -> \([0-9.]*\).*/\1/p' "$1")
initial=$(sed -n 's/^step 0 | val loss \([0-9.]*\)$/\1/p' "$2")
echo "validation loss: trained model $final, imported model $initial"
[[ -n "$final" && "$final" == "$initial" ]]
