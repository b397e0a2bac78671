#!/usr/bin/env bash
# tokenize_cpu.sh -- `kintsugi data tokenize` vs. the reference implementation, same machine,
# same run, same documents, same ids.
#
# What it measures
#   For each corpus and tokenizer it tokenizes one JSONL file (one document per line) with
#     * the reference: @lenml/tokenizers (the JavaScript port of Hugging Face's tokenizers that
#       the tokenizer tests take their expected ids from), one Node.js process:
#       bench/tokenize/reference_tokenize.mjs
#     * kintsugi: "$KINTSUGI" data tokenize --jsonl --format megatron, with 1 thread and with
#       --threads (default: every core)
#   and prints one markdown table: megabytes per second of input (reading, parsing, encoding;
#   loading the tokenizer not counted, on either side), kintsugi's rate over the reference's, and
#   whether kintsugi's .bin is byte-identical to the reference's ids (a run that differs says so
#   in the table and makes the script exit 1).
#
# Corpora: brown = the Brown training text (data/brown/train.txt, 449 documents, ~5.4 MB as
# JSONL), big = the same documents repeated to at least --big-mb megabytes (default 100).
# Tokenizers: llama3 (byte-level BPE, 128256 ids) and mistral (SentencePiece-style BPE with byte
# fallback, 32000 ids), from data/ (scripts/fetch_data.sh).
#
# Noise: the machine may be shared, so runs are interleaved (each repeat runs every case once)
# and the BEST rate over the repeats is reported (other processes only ever slow a run down);
# the loadavg before and after is printed. Compare the ratio column, not absolute rates.
#
# Usage
#   bench/tokenize_cpu.sh [--kintsugi build/kintsugi] [--repeats 2] [--threads 0]
#                         [--big-mb 100] [--corpora brown,big] [--tokenizers llama3,mistral]
#                         [--work DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

KINTSUGI=build/kintsugi
REPEATS=2
THREADS=0
BIG_MB=100
CORPORA=brown,big
TOKENIZERS=llama3,mistral
WORK=build/bench-tokenize
NODE_MODULES=.cache/npm/node_modules
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kintsugi) KINTSUGI=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --big-mb) BIG_MB=$2; shift 2 ;;
    --corpora) CORPORA=$2; shift 2 ;;
    --tokenizers) TOKENIZERS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "tokenize_cpu.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $KINTSUGI ]] || { echo "tokenize_cpu.sh: $KINTSUGI not found: build first or pass --kintsugi" >&2; exit 2; }
[[ -f data/brown/train.txt && -d $NODE_MODULES/@lenml/tokenizers ]] ||
  { echo "tokenize_cpu.sh: data/brown/train.txt or $NODE_MODULES missing: run scripts/fetch_data.sh" >&2; exit 2; }
(( THREADS > 0 )) || THREADS=$(nproc)
mkdir -p "$WORK"

declare -A TOKENIZER_DIR=([llama3]=data/llama3-tokenizer [mistral]=data/mistral-tokenizer)
declare -A CORPUS_MB=([brown]=0 [big]=$BIG_MB)
IFS=, read -ra corpora <<< "$CORPORA"
IFS=, read -ra tokenizers <<< "$TOKENIZERS"
for c in "${corpora[@]}"; do
  [[ -f $WORK/$c.jsonl ]] || node bench/tokenize/to_jsonl.mjs data/brown/train.txt "$WORK/$c.jsonl" "${CORPUS_MB[$c]}" >&2
done

declare -A BEST  # case -> best MB/s
better() { awk -v a="${1:-0}" -v b="$2" 'BEGIN { print (b > a ? b : a) }'; }
mbps_of_kintsugi() { sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p'; }
STATUS=0
declare -A SAME
echo "loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((r = 1; r <= REPEATS; ++r)); do
  for c in "${corpora[@]}"; do
    for t in "${tokenizers[@]}"; do
      dir=${TOKENIZER_DIR[$t]}
      ref=$(node bench/tokenize/reference_tokenize.mjs "$NODE_MODULES" "$dir" "$WORK/$c.jsonl" "$WORK/$c.$t.ref.bin")
      ref_mbps=$(node -e 'const j = JSON.parse(process.argv[1]); console.log((j.bytes / 1e6 / j.seconds).toFixed(3))' "$ref")
      BEST[$c.$t.ref]=$(better "${BEST[$c.$t.ref]:-}" "$ref_mbps")
      for n in 1 "$THREADS"; do
        line=$("$KINTSUGI" data tokenize --tokenizer "$dir" --jsonl --format megatron --threads "$n" \
                 --out "$WORK/$c.$t.k$n" "$WORK/$c.jsonl")
        BEST[$c.$t.k$n]=$(better "${BEST[$c.$t.k$n]:-}" "$(mbps_of_kintsugi <<< "$line")")
        if cmp -s "$WORK/$c.$t.k$n.bin" "$WORK/$c.$t.ref.bin"; then
          SAME[$c.$t]=${SAME[$c.$t]:-yes}
        else
          SAME[$c.$t]=NO; STATUS=1
        fi
      done
      echo "repeat $r $c $t: reference $ref_mbps MB/s; kintsugi 1 thread ${BEST[$c.$t.k1]}, $THREADS threads ${BEST[$c.$t.k$THREADS]} (best so far)" >&2
    done
  done
done
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo
echo "| corpus | tokenizer | MB | reference MB/s | kintsugi 1 thread MB/s | kintsugi $THREADS threads MB/s | x reference (1 thread) | x reference ($THREADS threads) | ids identical |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---|"
for c in "${corpora[@]}"; do
  mb=$(awk -v b="$(stat -c %s "$WORK/$c.jsonl")" 'BEGIN { printf "%.1f", b / 1e6 }')
  for t in "${tokenizers[@]}"; do
    awk -v c="$c" -v t="$t" -v mb="$mb" -v ref="${BEST[$c.$t.ref]}" -v k1="${BEST[$c.$t.k1]}" \
        -v kn="${BEST[$c.$t.k$THREADS]}" -v same="${SAME[$c.$t]}" \
        'BEGIN { printf "| %s | %s | %s | %.2f | %.2f | %.2f | %.1f | %.1f | %s |\n", c, t, mb, ref, k1, kn, k1 / ref, kn / ref, same }'
  done
done
exit $STATUS
