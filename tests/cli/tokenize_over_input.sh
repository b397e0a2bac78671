#!/usr/bin/env bash
# `data tokenize` never replaces a file it reads: an --out that is one of the inputs (by its own
# name, or by another name for the same file), Megatron's PREFIX.bin over an input, or the
# tokenizer's file, is refused with one line before anything is written, and the file keeps
# its bytes (docs/data.md).
# Usage: tokenize_over_input.sh KINTSUGI TOKENIZER_DIR SCRATCH_DIR
set -uo pipefail
kintsugi="$1" tokenizer="$2" dir="$3"
here="$(cd "$(dirname "$0")" && pwd)"
die() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir"
printf 'Some text.\n<|endoftext|>\nMore text.\n' >"$dir/corpus.txt"
ln "$dir/corpus.txt" "$dir/other-name.txt"  # the same file (inode) under another name
cp "$dir/corpus.txt" "$dir/corpus.bin"
cp -r "$tokenizer" "$dir/tokenizer"
sums() { md5sum "$dir/corpus.txt" "$dir/corpus.bin" "$dir"/tokenizer/*; }
before="$(sums)"
tokenize=("$kintsugi" data tokenize --tokenizer "$dir/tokenizer")
replaced="would replace .*, which this command reads.*: choose another --out"

"$here/expect_error.sh" "$replaced" "${tokenize[@]}" --out "$dir/corpus.txt" "$dir/corpus.txt" || exit 1
"$here/expect_error.sh" "$replaced" "${tokenize[@]}" --out "$dir/other-name.txt" "$dir/corpus.txt" ||
  exit 1
"$here/expect_error.sh" "$replaced" "${tokenize[@]}" --format megatron --out "$dir/corpus" \
  "$dir/corpus.bin" || exit 1
"$here/expect_error.sh" "$replaced" "${tokenize[@]}" --out "$(ls "$dir"/tokenizer/* | head -1)" \
  "$dir/corpus.txt" || exit 1
[[ "$(sums)" == "$before" ]] || die "a file that was read changed"
compgen -G "$dir/*.tmp.*" >/dev/null && die "a temporary file was left: $(ls "$dir")"

"${tokenize[@]}" --out "$dir/tokens.bin" "$dir/corpus.txt" >/dev/null || die "a new --out was refused"
echo "every --out over a file that is read was refused; the files are as they were"
