#include "kintsugi/data/tokenizer_identity.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi::data {

std::string TokenizerIdentity::describe() const {
  if (!known()) return "an unrecorded tokenizer";
  std::string text = vocab_size > 0 ? fmt::format("vocabulary {}", vocab_size) : "";
  if (fingerprint != 0)
    text += fmt::format("{}fingerprint {:016x}", text.empty() ? "" : ", ", fingerprint);
  return text;
}

TokenizerIdentity TokenizerIdentity::merged(const TokenizerIdentity& other) const {
  return {vocab_size > 0 ? vocab_size : other.vocab_size,
          fingerprint != 0 ? fingerprint : other.fingerprint};
}

TokenizerIdentity identity_of(const Tokenizer& tokenizer) {
  return {tokenizer.vocab_size(), tokenizer.fingerprint()};
}

bool conflict(const TokenizerIdentity& a, const TokenizerIdentity& b) {
  return (a.vocab_size > 0 && b.vocab_size > 0 && a.vocab_size != b.vocab_size) ||
         (a.fingerprint != 0 && b.fingerprint != 0 && a.fingerprint != b.fingerprint);
}

void check_same_tokenizer(const std::string& a_what, const TokenizerIdentity& a,
                          const std::string& b_what, const TokenizerIdentity& b, bool allow,
                          std::string* warning) {
  if (warning) warning->clear();
  if (!conflict(a, b)) return;
  const std::string text =
      fmt::format("{} was made with the tokenizer of {} but {} with {}", a_what, a.describe(),
                  b_what, b.describe());
  if (!allow)
    fail("{}: their ids mean different text; use the same tokenizer for both (or pass {} if "
         "the mismatch is deliberate)",
         text, kAllowMismatchFlag);
  if (warning) *warning = fmt::format("warning: {} ({} given)", text, kAllowMismatchFlag);
}

nlohmann::json to_json(const TokenizerIdentity& identity) {
  if (!identity.known()) return nullptr;
  nlohmann::json j = nlohmann::json::object();
  if (identity.vocab_size > 0) j["vocab_size"] = identity.vocab_size;
  if (identity.fingerprint != 0) j["xxh3"] = fmt::format("{:016x}", identity.fingerprint);
  return j;
}

TokenizerIdentity identity_from_json(const nlohmann::json& manifest, const std::string& what) {
  if (!manifest.is_object() || !manifest.contains("tokenizer") || manifest.at("tokenizer").is_null())
    return {};
  const nlohmann::json& t = manifest.at("tokenizer");
  TokenizerIdentity id;
  const auto bad = [&] {
    fail("{} is damaged: tokenizer = {} is not {{\"vocab_size\": N, \"xxh3\": \"16 hex digits\"}}",
         what, t.dump());
  };
  if (!t.is_object()) bad();
  if (t.contains("vocab_size")) {
    if (!t.at("vocab_size").is_number_integer() || t.at("vocab_size").get<std::int64_t>() <= 0)
      bad();
    id.vocab_size = t.at("vocab_size").get<std::int64_t>();
  }
  if (t.contains("xxh3")) {
    if (!t.at("xxh3").is_string()) bad();
    const std::string hex = t.at("xxh3").get<std::string>();
    char* end = nullptr;
    id.fingerprint = std::strtoull(hex.c_str(), &end, 16);
    if (hex.size() != 16 || *end != '\0') bad();
  }
  return id;
}

}  // namespace kintsugi::data
