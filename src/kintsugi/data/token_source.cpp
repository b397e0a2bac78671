#include "kintsugi/data/token_source.hpp"

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/megatron_dataset.hpp"
#include "kintsugi/data/token_file.hpp"

namespace kintsugi::data {

std::unique_ptr<TokenSource> open_token_source(const std::filesystem::path& path) {
  if (is_megatron_dataset(path)) return MegatronDataset::open(path);
  return std::make_unique<TokenFile>(TokenFile::open(path));
}

void require_ids_below(const TokenSource& source, std::int64_t vocab_size, std::string_view key) {
  if (source.max_id() >= vocab_size)
    fail("{} holds token id {} (at position {}), beyond the model's vocabulary of {} "
         "(model.vocab_size): raise model.vocab_size or point {} at data made with the model's "
         "tokenizer", source.path().string(), source.max_id(), source.max_id_position(),
         vocab_size, key);
}

}  // namespace kintsugi::data
