#include "kintsugi/train/train_data.hpp"

#include <fmt/format.h>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi {
namespace {

data::BatchSampler::Source open_source(const std::string& path, double weight, const char* key,
                                       const RunConfig& config) {
  if (path.empty())
    fail("{} is empty: name a token file or Megatron dataset (`kintsugi data tokenize` makes "
         "one)",
         key);
  std::shared_ptr<const data::TokenSource> tokens;
  try {  // the file's own message, after the key that named it
    tokens = data::open_token_source(path);
  } catch (const Error& e) {
    fail("{}: {}", key, e.what());
  }
  data::require_ids_below(*tokens, config.model.vocab_size, key);
  return {std::move(tokens), weight};
}

}  // namespace

data::BatchSampler open_train_data(const RunConfig& config) {
  std::vector<data::BatchSampler::Source> sources;
  if (config.data.blend.empty())
    sources.push_back(open_source(config.data.train, 1, "data.train", config));
  for (const DataSource& d : config.data.blend)
    sources.push_back(open_source(d.path, d.weight, "data.train", config));
  return data::BatchSampler(std::move(sources), config.model.seq_len,
                            static_cast<std::uint64_t>(config.train.seed));
}

std::optional<data::BatchSampler> open_val_data(const RunConfig& config) {
  std::vector<data::BatchSampler::Source> sources;
  for (const DataSource& d : config.data.blend)
    if (!d.val.empty()) sources.push_back(open_source(d.val, 1, "data.train's val", config));
  if (sources.empty() && !config.data.val.empty())
    sources.push_back(open_source(config.data.val, 1, "data.val", config));
  if (sources.empty()) return std::nullopt;
  return data::BatchSampler(std::move(sources), config.model.seq_len,
                            static_cast<std::uint64_t>(config.train.seed));
}

data::BatchSampler open_one_dataset(const std::string& path, const char* key,
                                    const RunConfig& config) {
  std::vector<data::BatchSampler::Source> sources;
  sources.push_back(open_source(path, 1, key, config));
  return data::BatchSampler(std::move(sources), config.model.seq_len,
                            static_cast<std::uint64_t>(config.train.seed));
}

namespace {
constexpr std::string_view kPlaceholder = "<set me: ";
}  // namespace

std::string data_placeholder(std::string_view what) {
  return fmt::format("{}{}>", kPlaceholder, what);
}

void refuse_data_placeholders(const DataConfig& data) {
  for (const auto& [key, value] : {std::pair{"data.train", &data.train},
                                   std::pair{"data.val", &data.val},
                                   std::pair{"data.tokenizer", &data.tokenizer}})
    if (value->starts_with(kPlaceholder))
      fail("{} = \"{}\" is a placeholder (`kintsugi plan --write-config` cannot know your data): "
           "set it in the config or with --set {}=PATH",
           key, *value, key);
}

std::string describe_data(const data::BatchSampler& sampler) {
  std::string text;
  double total = 0;
  for (std::size_t i = 0; i < sampler.num_sources(); ++i) total += sampler.weight(i);
  for (std::size_t i = 0; i < sampler.num_sources(); ++i) {
    text += fmt::format("{}{} ({} tokens", i ? ", " : "", sampler.tokens(i).path().string(),
                        sampler.tokens(i).size());
    if (sampler.num_sources() > 1)
      text += fmt::format(", weight {:.3g}", sampler.weight(i) / total);
    text += ")";
  }
  return text;
}

std::int32_t document_end_id(const DataConfig& data) {
  if (!data.document_attention) return -1;
  if (data.eod_id >= 0) return static_cast<std::int32_t>(data.eod_id);
  try {
    return data::load_tokenizer(data.tokenizer, "data.tokenizer")->eos_id();
  } catch (const Error& e) {
    fail("data.document_attention needs the end-of-document id: set data.eod_id, or "
         "data.tokenizer to the data's tokenizer ({})", e.what());
  }
}

}  // namespace kintsugi
