#pragma once
// Training data as one flat stream of token ids, whichever file format holds it: kintsugi's
// token files (token_file.hpp) or Megatron-LM's indexed datasets (megatron_dataset.hpp).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kintsugi/data/tokenizer_identity.hpp"

namespace kintsugi::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Tokens in the stream.
  virtual std::int64_t size() const = 0;
  // Copies tokens [begin, begin + count) to `out`; the range must lie inside the stream.
  virtual void read(std::int64_t begin, std::int64_t count, std::int32_t* out) const = 0;
  virtual const std::filesystem::path& path() const = 0;
  // The largest id in the stream and the first position holding it (-1 and -1 when empty),
  // found when the file was opened.
  virtual std::int32_t max_id() const = 0;
  virtual std::int64_t max_id_position() const = 0;
  // One line for logs: format and size.
  virtual std::string describe() const = 0;
  // The tokenizer that made the ids, as far as the file records it (Megatron datasets: not).
  virtual TokenizerIdentity tokenizer() const { return {}; }
};

// A Megatron dataset when `path` names its .idx or .bin (the other file next to it) or the
// common prefix of both; a kintsugi token file otherwise. Every file is validated before use.
std::unique_ptr<TokenSource> open_token_source(const std::filesystem::path& path);

// kintsugi::Error naming the file, the id and its position when the source holds an id that
// `vocab_size` (config key `key`) does not cover.
void require_ids_below(const TokenSource& source, std::int64_t vocab_size, std::string_view key);

// The same for ids made in memory (a prompt as a tokenizer encoded it): kintsugi::Error naming
// `what`, the first id outside [0, vocab_size), its position and the vocabulary size, then
// `fix`. An id outside the model's vocabulary would embed as a zero (or padding) row on every
// backend without a word, so none reaches one.
void require_ids_below(std::span<const std::int32_t> ids, std::int64_t vocab_size,
                       std::string_view what, std::string_view fix);

// A source that records no tokenizer (a Megatron dataset: its files have no place for one)
// cannot be compared by check_same_tokenizer; its largest id still proves that a tokenizer with
// fewer ids did not make it. kintsugi::Error naming the file, the id and `tokenizer_what` (the
// flag or key that named the tokenizer, and its path) when the id is outside the vocabulary
// `tokenizer` records; with `allow`, the same text as a warning in `warning` (empty otherwise).
// Nothing for a source that records its tokenizer or a tokenizer of unknown vocabulary.
void check_ids_fit_tokenizer(const TokenSource& source, const std::string& tokenizer_what,
                             const TokenizerIdentity& tokenizer, bool allow,
                             std::string* warning = nullptr);

// One note line for the sources among `sources` that record no tokenizer: what was compared
// (their largest ids with the vocabulary of `tokenizer_what`) and what could not be (that this
// tokenizer made the ids). Empty when every source records its tokenizer.
std::string unrecorded_tokenizer_note(const std::vector<const TokenSource*>& sources,
                                      const std::string& tokenizer_what,
                                      const TokenizerIdentity& tokenizer);

}  // namespace kintsugi::data
