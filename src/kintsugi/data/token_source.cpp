#include "kintsugi/data/token_source.hpp"

#include <fmt/format.h>

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

}  // namespace kintsugi::data
