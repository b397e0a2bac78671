#include "kintsugi/data/token_source.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/megatron_dataset.hpp"
#include "kintsugi/data/token_file.hpp"

namespace kintsugi::data {

std::unique_ptr<TokenSource> open_token_source(const std::filesystem::path& path) {
  if (is_megatron_dataset(path)) return MegatronDataset::open(path);
  return std::make_unique<TokenFile>(TokenFile::open(path));
}

void require_ids_below(const TokenSource& source, std::int64_t vocab_size, std::string_view key) {
  if (source.max_id() < vocab_size) return;
  // Ids past the vocabulary mean data of another tokenizer (GPT-2's ids on a Llama): the data
  // is what to change, not the model.
  const TokenizerIdentity made_with = source.tokenizer();
  fail("{} holds token id {} (at position {}), beyond the model's vocabulary of {}{}: point {} "
       "at data made with the model's tokenizer (`kintsugi data tokenize --tokenizer` with it)",
       source.path().string(), source.max_id(), source.max_id_position(), vocab_size,
       made_with.known()
           ? fmt::format(" (its header records a tokenizer of {})", made_with.describe())
           : "",
       key);
}

void require_ids_below(std::span<const std::int32_t> ids, std::int64_t vocab_size,
                       std::string_view what, std::string_view fix) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      fail("{} holds token id {} (at position {}), outside the model's vocabulary of {} "
           "(model.vocab_size): {}",
           what, ids[i], i, vocab_size, fix);
}

void check_ids_fit_tokenizer(const TokenSource& source, const std::string& tokenizer_what,
                             const TokenizerIdentity& tokenizer, bool allow,
                             std::string* warning) {
  if (warning) warning->clear();
  if (source.tokenizer().known() || tokenizer.vocab_size <= 0 ||
      source.max_id() < tokenizer.vocab_size)
    return;
  const std::string text = fmt::format(
      "{} holds token id {} (at position {}), outside the vocabulary of {} ({}): its ids were "
      "made with another tokenizer",
      source.path().string(), source.max_id(), source.max_id_position(), tokenizer_what,
      tokenizer.describe());
  if (!allow)
    fail("{}; use the data's own tokenizer (or pass {} if the mismatch is deliberate)", text,
         kAllowMismatchFlag);
  if (warning) *warning = fmt::format("warning: {} ({} given)", text, kAllowMismatchFlag);
}

std::string unrecorded_tokenizer_note(const std::vector<const TokenSource*>& sources,
                                      const std::string& tokenizer_what,
                                      const TokenizerIdentity& tokenizer) {
  std::vector<std::string> paths, ids;
  for (const TokenSource* s : sources)
    if (s && !s->tokenizer().known() &&
        std::find(paths.begin(), paths.end(), s->path().string()) == paths.end()) {  // once each
      paths.push_back(s->path().string());
      ids.push_back(std::to_string(s->max_id()));
    }
  if (paths.empty()) return "";
  const bool one = paths.size() == 1;
  if (tokenizer.vocab_size <= 0)
    return fmt::format("note: {} record{} no tokenizer (a Megatron dataset has no place for one) "
                       "and {} records no vocabulary: which tokenizer made {} ids could not be "
                       "checked",
                       fmt::join(paths, ", "), one ? "s" : "", tokenizer_what,
                       one ? "its" : "their");
  return fmt::format(
      "note: {} record{} no tokenizer (a Megatron dataset has no place for one): only {} ({}) "
      "{} compared with the vocabulary of {} ({} ids); whether that tokenizer made {} ids could "
      "not be checked",
      fmt::join(paths, ", "), one ? "s" : "", one ? "its largest id" : "their largest ids",
      fmt::join(ids, ", "), one ? "was" : "were", tokenizer_what, tokenizer.vocab_size,
      one ? "its" : "their");
}

}  // namespace kintsugi::data
