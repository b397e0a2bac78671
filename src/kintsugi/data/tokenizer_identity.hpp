#pragma once
// Which tokenizer made a stream of ids (docs/data.md "Which tokenizer made the ids"): its
// vocabulary size and fingerprint (Tokenizer::fingerprint). Token files carry it in their
// header, saved models and training checkpoints in their manifest, and every command that puts
// ids and weights or a tokenizer together compares the two and refuses a mismatch: ids of one
// tokenizer read by a model trained on another's train and sample without an error, as
// gibberish.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kintsugi::data {

class Tokenizer;

struct TokenizerIdentity {
  std::int64_t vocab_size = 0;   // 0: unknown
  std::uint64_t fingerprint = 0;  // 0: unknown (token files and models written before it was kept)

  bool known() const { return vocab_size > 0 || fingerprint != 0; }
  // "vocabulary 50257, fingerprint 0123456789abcdef" (the parts known).
  std::string describe() const;
  // What both know, the second filling in what the first lacks.
  TokenizerIdentity merged(const TokenizerIdentity& other) const;
};

TokenizerIdentity identity_of(const Tokenizer& tokenizer);

// Whether two identities name different tokenizers: a vocabulary size or a fingerprint both
// know and that differ. Unknown parts never conflict (files written before identities existed).
bool conflict(const TokenizerIdentity& a, const TokenizerIdentity& b);

// The flag that lets a deliberate mismatch through, named in every refusal.
inline constexpr const char* kAllowMismatchFlag = "--allow-tokenizer-mismatch";

// kintsugi::Error "<a_what> was made with the tokenizer <a> but <b_what> with <b>: ..." when the
// two conflict and `allow` is false; with `allow`, the same text as a warning in `warning` (empty
// otherwise).
void check_same_tokenizer(const std::string& a_what, const TokenizerIdentity& a,
                          const std::string& b_what, const TokenizerIdentity& b, bool allow,
                          std::string* warning = nullptr);

// The manifest member {"vocab_size": n, "xxh3": "16 hex digits"} (null when unknown), and back
// (an absent or null member: unknown; a malformed one: kintsugi::Error naming `what`).
nlohmann::json to_json(const TokenizerIdentity& identity);
TokenizerIdentity identity_from_json(const nlohmann::json& manifest, const std::string& what);

}  // namespace kintsugi::data
