#pragma once
// The Brown corpus as scripts/fetch_data.sh writes it, for tests that train a model: in the
// 512-id tokenizer the tests' tiny models use (GPT-2's BPE cut after 255 merges: the model's
// embedding and LM head stay small, so a step takes milliseconds), or in GPT-2's own 50257 ids
// for the test that checks what the demo model learns.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/test_paths.hpp"

namespace kintsugi {

struct BrownData {
  std::string train, val, tokenizer;
  int vocab_size;
};

inline BrownData brown_data(bool gpt2_ids = false) {
  const std::string data = testing::data_dir();
  const BrownData d = gpt2_ids ? BrownData{data + "/brown/train.bin", data + "/brown/val.bin",
                                           data + "/gpt2-tokenizer", 50257}
                               : BrownData{data + "/brown/gpt2-512/train.bin",
                                           data + "/brown/gpt2-512/val.bin",
                                           data + "/gpt2-512-tokenizer", 512};
  if (!std::filesystem::exists(d.train))
    ADD_FAILURE() << d.train << " is missing: run scripts/fetch_data.sh";
  return d;
}

// `--set` overrides that train on brown_data(gpt2_ids).
inline std::vector<std::string> brown_overrides(bool gpt2_ids = false) {
  const BrownData d = brown_data(gpt2_ids);
  return {"data.train=" + d.train, "data.val=" + d.val, "data.tokenizer=" + d.tokenizer,
          "model.vocab_size=" + std::to_string(d.vocab_size)};
}

}  // namespace kintsugi
