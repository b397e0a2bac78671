#include "kintsugi/train/tokenizer_check.hpp"

#include <fmt/format.h>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi {

data::TokenizerIdentity data_tokenizer(const std::vector<const data::BatchSampler*>& data,
                                       const DataConfig& config, std::int64_t model_vocab_size,
                                       const std::string& given_as, bool allow,
                                       std::vector<std::string>& notes) {
  data::TokenizerIdentity run;
  std::string first;  // the file `run` came from
  std::string unfingerprinted;
  std::string warning;
  std::vector<const data::TokenSource*> sources;
  for (const data::BatchSampler* sampler : data) {
    if (!sampler) continue;
    for (std::size_t i = 0; i < sampler->num_sources(); ++i) {
      const data::TokenSource& source = sampler->tokens(i);
      sources.push_back(&source);
      const data::TokenizerIdentity id = source.tokenizer();
      if (!id.known()) continue;  // a Megatron dataset: checked by its ids below
      if (id.fingerprint == 0 && unfingerprinted.empty()) unfingerprinted = source.path().string();
      if (first.empty()) {
        run = id;
        first = source.path().string();
        continue;
      }
      data::check_same_tokenizer(first, run, source.path().string(), id, allow, &warning);
      if (!warning.empty()) notes.push_back(warning);
      run = run.merged(id);
    }
  }
  // data.tokenizer is what the model saves and `generate` decodes with: it must be the data's,
  // and every check of the data against it needs it loaded (one that does not load is an
  // error, not a check skipped).
  const std::string named_what = fmt::format("{} {}", given_as, config.tokenizer);
  const data::TokenizerIdentity named =
      data::identity_of(*data::load_tokenizer(config.tokenizer, given_as));
  if (named.vocab_size > model_vocab_size)
    fail("{} has {} ids, more than the model's vocabulary of {} (model.vocab_size{}): ids from "
         "{} on would have no embedding row; use the model's own tokenizer, or a model of at "
         "least {} ids",
         named_what, named.vocab_size, model_vocab_size,
         given_as == "--init-from" ? ", from the folder's config.json" : "", model_vocab_size,
         named.vocab_size);
  data::check_same_tokenizer(first.empty() ? "the data" : first, run, named_what, named, allow,
                             &warning);
  if (!warning.empty()) notes.push_back(warning);
  for (const data::TokenSource* source : sources) {
    data::check_ids_fit_tokenizer(*source, named_what, named, allow, &warning);
    if (!warning.empty()) notes.push_back(warning);
  }
  // A deliberate mismatch keeps the data's identity: the ids are what the model learns.
  run = run.merged(named);
  if (!unfingerprinted.empty())
    notes.push_back(fmt::format(
        "note: {} records no tokenizer fingerprint (written before token files kept one): only "
        "its vocabulary size was compared with {}'s; re-create it with `kintsugi data tokenize` "
        "to have it checked",
        unfingerprinted, given_as));
  if (std::string note = data::unrecorded_tokenizer_note(sources, named_what, named);
      !note.empty())
    notes.push_back(std::move(note));
  return run;
}

}  // namespace kintsugi
