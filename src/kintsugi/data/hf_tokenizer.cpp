#include "kintsugi/data/hf_tokenizer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <deque>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/added_tokens.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/data/hf_bpe.hpp"
#include "kintsugi/data/fetched_files.hpp"
#include "kintsugi/data/hf_decoder.hpp"
#include "kintsugi/data/hf_normalizer.hpp"
#include "kintsugi/data/hf_pretokenizer.hpp"
#include "kintsugi/data/read_file.hpp"
#include "kintsugi/data/utf8.hpp"
#include "kintsugi/data/workspace_pool.hpp"

namespace kintsugi::data {
namespace {

using Json = nlohmann::json;
using Vocab = std::unordered_map<std::string, std::int32_t>;

// End-of-document tokens by their usual names, for files without a tokenizer_config.json.
constexpr std::string_view kEosNames[] = {"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"};

Json parse_json_file(const std::filesystem::path& path, std::string& text) {
  text = read_file(path, std::string(hint_for(path,
                                              "scripts/fetch_data.sh fetches the tokenizers the "
                                              "examples use",
                                              "check the path")));
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    fail("{} is not valid JSON ({}): fetch or export the tokenizer again", path.string(),
         e.what());
  }
}

// A token named in tokenizer_config.json: a string, or an object with "content".
std::optional<std::string> config_token(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

struct HfWorkspace {
  HfBpeWorkspace bpe;
  std::vector<AddedTokens::Section> sections;
  std::string normalized;
  std::deque<std::string> arena;
  std::vector<std::string_view> pieces;
};

struct HfTokenizer::Impl {
  std::filesystem::path path;
  std::string json_text, config_text;  // the files as read, for save()
  std::uint64_t fingerprint = 0;       // of json_text as compact JSON (tokenizer.hpp)
  Vocab vocab;                         // model vocabulary and added tokens
  std::vector<std::string> id_to_token;
  std::vector<char> id_kind;  // 0: no token, 1: model token, 2: added token
  std::unique_ptr<AddedTokens> added;
  std::unique_ptr<HfNormalizer> normalizer;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer;
  std::unique_ptr<HfBpe> model;
  std::unique_ptr<HfDecoder> decoder;
  std::vector<std::int32_t> prefix, suffix;
  std::int32_t eos = -1;
  std::optional<std::int32_t> bos;
  mutable WorkspacePool<HfWorkspace> workspaces;

  std::string what() const { return path.string(); }
  void load_vocab(const Json& json);
  void load_post_processor(const Json& config);
  void load_specials(const Json& config);
  std::int32_t special_id(const std::string& token, const char* where) const;
};

void HfTokenizer::Impl::load_vocab(const Json& json) {
  const Json& model = json.at("model");
  const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
  if (type != "BPE")
    fail("{}: model type \"{}\" is not supported: kintsugi reads BPE tokenizers (byte-level "
         "like GPT-2 and Llama 3, or SentencePiece-style like Llama 2), not WordPiece, Unigram "
         "or WordLevel", what(), type);
  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail("{}: model.vocab must be an object of token ids", what());
  std::int32_t max_id = -1;
  // Ids index tables of vocab_size() entries, here and in every model trained on the ids (its
  // embedding rows): they must number the tokens from 0. Gaps are allowed, but an id past
  // twice the number of tokens the file defines is a damaged file, refused before any table
  // of that size is allocated.
  const Json added_json = json.value("added_tokens", Json::array());
  const auto tokens = static_cast<std::int64_t>(model["vocab"].size() + added_json.size());
  auto add = [&](const std::string& token, const Json& id_json, char kind) {
    if (!id_json.is_number_integer() || id_json.get<std::int64_t>() < 0 ||
        id_json.get<std::int64_t>() >= (1LL << 31) - 1)
      fail("{}: the id of token {} is not a non-negative 32-bit integer", what(), Json(token).dump());
    if (id_json.get<std::int64_t>() >= 2 * tokens)
      fail("{}: the id of token {} is {}, but the file defines {} tokens: ids must number the "
           "vocabulary from 0 (at most twice as many ids as tokens)",
           what(), Json(token).dump(), id_json.get<std::int64_t>(), tokens);
    const auto id = id_json.get<std::int32_t>();
    if (id >= static_cast<std::int32_t>(id_to_token.size()))
      id_to_token.resize(id + 1), id_kind.resize(id + 1, 0);
    // One id, one token: two would decode alike and the second would take the first's
    // embedding row. (An added token repeating its vocabulary entry is the same token.)
    if (id_kind[id] != 0 && id_to_token[id] != token)
      fail("{}: tokens {} and {} both have the id {}: every token needs its own id (a damaged "
           "or hand-edited file)",
           what(), Json(id_to_token[id]).dump(), Json(token).dump(), id);
    vocab[token] = id;
    id_to_token[id] = token;
    id_kind[id] = kind;
    max_id = std::max(max_id, id);
  };
  for (const auto& [token, id] : model["vocab"].items()) add(token, id, 1);
  std::vector<AddedToken> added_tokens;
  for (const auto& t : added_json) {
    AddedToken a{.content = t.at("content").get<std::string>(), .id = 0,
                 .special = t.value("special", false), .lstrip = t.value("lstrip", false),
                 .rstrip = t.value("rstrip", false)};
    add(a.content, t.at("id"), 2);
    a.id = t["id"].get<std::int32_t>();
    added_tokens.push_back(std::move(a));
  }
  if (max_id < 0) fail("{}: the vocabulary is empty", what());
  added = std::make_unique<AddedTokens>(std::move(added_tokens));
}

std::int32_t HfTokenizer::Impl::special_id(const std::string& token, const char* where) const {
  auto it = vocab.find(token);
  if (it == vocab.end())
    fail("{}: {} names {}, which is not in the vocabulary", what(), where, Json(token).dump());
  return it->second;
}

// The specials around a single text, from the post-processor.
void HfTokenizer::Impl::load_post_processor(const Json& config) {
  if (config.is_null()) return;
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& p : config.at("processors")) load_post_processor(p);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "TemplateProcessing") {
    const Json& specials = config.value("special_tokens", Json::object());
    bool after = false;
    for (const auto& item : config.at("single")) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      std::vector<std::int32_t> ids;
      if (specials.contains(name) && specials[name].contains("ids"))
        ids = specials[name]["ids"].get<std::vector<std::int32_t>>();
      else
        ids = {special_id(name, "the post-processor")};
      auto& target = after ? suffix : prefix;
      target.insert(target.end(), ids.begin(), ids.end());
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(config.at("cls").at(1).get<std::int32_t>());
    suffix.push_back(config.at("sep").at(1).get<std::int32_t>());
  } else {
    fail("{}: post-processor type \"{}\" is not supported (kintsugi reads TemplateProcessing, "
         "ByteLevel, RobertaProcessing, BertProcessing and Sequence)", what(), type);
  }
}

// BOS and EOS from tokenizer_config.json, else EOS by its usual names.
void HfTokenizer::Impl::load_specials(const Json& config) {
  for (const char* key : {"remove_space", "do_lowercase_and_remove_accent"})
    if (config.value(key, false))
      fail("{}: tokenizer_config.json sets {}, which kintsugi does not implement", what(), key);
  if (auto name = config_token(config, "bos_token"); name && vocab.count(*name))
    bos = vocab.at(*name);
  if (auto name = config_token(config, "eos_token")) {
    eos = special_id(*name, "tokenizer_config.json's eos_token");
    return;
  }
  for (std::string_view name : kEosNames)
    if (auto it = vocab.find(std::string(name)); it != vocab.end()) {
      eos = it->second;
      return;
    }
  fail("{}: no end-of-document token: put a tokenizer_config.json with \"eos_token\" next to it",
       what());
}

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::filesystem::path& json_path) {
  auto m = std::make_unique<Impl>();
  m->path = json_path;
  const Json json = parse_json_file(json_path, m->json_text);
  const std::string what = m->what();
  if (!json.is_object() || !json.contains("model"))
    fail("{} is not a Hugging Face tokenizer.json (no \"model\")", what);
  {  // keys sorted, no whitespace: the same for any formatting of the same file
    const std::string canonical = json.dump();
    m->fingerprint = XXH3_64bits(canonical.data(), canonical.size());
  }
  Json config = Json::object();
  const auto config_path = json_path.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) config = parse_json_file(config_path, m->config_text);
  try {
    m->load_vocab(json);
    m->normalizer = std::make_unique<HfNormalizer>(json.value("normalizer", Json()), what);
    m->pre_tokenizer = std::make_unique<HfPreTokenizer>(json.value("pre_tokenizer", Json()), what);
    m->model = std::make_unique<HfBpe>(json["model"], m->vocab, m->pre_tokenizer->byte_level(),
                                       what);
    m->decoder = std::make_unique<HfDecoder>(json.value("decoder", Json()), what);
    m->load_post_processor(json.value("post_processor", Json()));
    m->load_specials(config);
  } catch (const Json::exception& e) {
    fail("{}: malformed tokenizer file ({})", what, e.what());
  }
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(m)));
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

void HfTokenizer::encode_into(std::string_view text, std::vector<std::int32_t>& out) const {
  require_utf8(text, "text to encode");
  const Impl& m = *impl_;
  auto w = m.workspaces.borrow();
  m.added->split(text, w->sections);
  for (std::size_t s = 0; s < w->sections.size(); ++s) {
    const auto& section = w->sections[s];
    if (section.id >= 0) {
      out.push_back(section.id);
      continue;
    }
    if (section.text.empty()) continue;
    const std::string_view normalized = m.normalizer->apply(section.text, w->normalized);
    if (normalized.empty()) continue;
    w->arena.clear();
    m.pre_tokenizer->split(normalized, static_cast<int>(s), w->arena, w->pieces);
    const std::size_t first = out.size();
    for (std::string_view piece : w->pieces) m.model->encode(piece, w->bpe, out);
    m.model->fuse_unknown(out, first);
  }
}

std::string HfTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::vector<std::string> tokens;
  std::vector<bool> added;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || impl_->id_kind[id] == 0)
      fail("token id {} is not in this tokenizer's vocabulary ({} ids)", id, vocab_size());
    tokens.push_back(impl_->id_to_token[id]);
    added.push_back(impl_->id_kind[id] == 2);
  }
  return impl_->decoder->decode(std::move(tokens), added);
}

int HfTokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }
std::span<const std::int32_t> HfTokenizer::text_prefix() const { return impl_->prefix; }
std::span<const std::int32_t> HfTokenizer::text_suffix() const { return impl_->suffix; }
std::int32_t HfTokenizer::eos_id() const { return impl_->eos; }
std::optional<std::int32_t> HfTokenizer::bos_id() const { return impl_->bos; }

std::string HfTokenizer::describe() const {
  return fmt::format("Hugging Face tokenizer {} ({} BPE, {} ids)", impl_->path.string(),
                     impl_->model->byte_level() ? "byte-level" : "SentencePiece-style",
                     vocab_size());
}

std::uint64_t HfTokenizer::fingerprint() const { return impl_->fingerprint; }

std::vector<std::filesystem::path> HfTokenizer::save(const std::filesystem::path& dir,
                                                     std::int64_t model_max_length) const {
  write_text_file(dir / "tokenizer.json", impl_->json_text);
  // The file's own tokenizer_config.json (its specials, chat template, ...), else the specials
  // this tokenizer found; either way with the model's context.
  Json config = Json::object();
  if (!impl_->config_text.empty()) {
    config = Json::parse(impl_->config_text);  // parsed once already, when it was loaded
  } else {
    config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
              {"eos_token", impl_->id_to_token[impl_->eos]}};
    if (impl_->bos) config["bos_token"] = impl_->id_to_token[*impl_->bos];
  }
  config["model_max_length"] = model_max_length;
  write_text_file(dir / "tokenizer_config.json", config.dump(2) + "\n");
  return {dir / "tokenizer.json", dir / "tokenizer_config.json"};
}

}  // namespace kintsugi::data
