#include "kintsugi/train/tokenizer_check.hpp"

#include <fmt/format.h>

#include <optional>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi {

data::TokenizerIdentity data_tokenizer(const std::vector<const data::BatchSampler*>& data,
                                       const DataConfig& config, bool allow,
                                       std::vector<std::string>& notes) {
  data::TokenizerIdentity run;
  std::string first;  // the file `run` came from
  std::string unrecorded;
  std::string warning;
  for (const data::BatchSampler* sampler : data) {
    if (!sampler) continue;
    for (std::size_t i = 0; i < sampler->num_sources(); ++i) {
      const data::TokenSource& source = sampler->tokens(i);
      const data::TokenizerIdentity id = source.tokenizer();
      if (id.fingerprint == 0 && unrecorded.empty()) unrecorded = source.path().string();
      if (!id.known()) continue;
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
  // data.tokenizer is what the model saves and `generate` decodes with: it must be the data's.
  // One that does not load is not checked here (the run notes it when it saves the model).
  std::optional<data::TokenizerIdentity> named;
  try {
    named = data::identity_of(*data::load_tokenizer(config.tokenizer));
  } catch (const Error&) {
  }
  if (named) {
    data::check_same_tokenizer(first.empty() ? "the data" : first, run,
                               fmt::format("data.tokenizer {}", config.tokenizer), *named, allow,
                               &warning);
    if (!warning.empty()) notes.push_back(warning);
    // A deliberate mismatch keeps the data's identity: the ids are what the model learns.
    run = run.merged(*named);
  }
  if (!unrecorded.empty())
    notes.push_back(fmt::format(
        "note: {} records no tokenizer fingerprint (written before token files kept one): "
        "{}; re-create it with `kintsugi data tokenize` to have it checked",
        unrecorded,
        named ? "only its vocabulary size was compared with data.tokenizer's"
              : "its tokenizer cannot be checked"));
  return run;
}

}  // namespace kintsugi
