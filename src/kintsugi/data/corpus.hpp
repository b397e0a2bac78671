#pragma once
// Tokenizing a corpus on every core: the documents of the input files (text files split at
// "<|endoftext|>" lines, documents.hpp, or JSONL records, jsonl.hpp) are encoded in batches by
// worker threads, each document as Tokenizer::encode_document gives it, and handed to the sink
// in input order, so the output is the same for any number of threads.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi::data {

struct CorpusOptions {
  bool jsonl = false;         // inputs are JSON Lines
  std::string key = "text";   // JSONL: the field holding the document
  int threads = 0;            // 0: every core
  std::size_t batch_bytes = std::size_t{16} << 20;  // text handed to the workers at once
};

struct CorpusStats {
  std::size_t documents = 0, bytes = 0;  // bytes of input files
  std::int64_t tokens = 0;
  double seconds = 0;  // reading and encoding, without loading the tokenizer
  int threads = 0;
};

using DocumentSink = std::function<void(std::span<const std::int32_t> ids)>;

// kintsugi::Error naming the file (and line, for JSONL) of the first bad input in input order;
// empty documents are skipped.
CorpusStats tokenize_corpus(const Tokenizer& tokenizer,
                            const std::vector<std::filesystem::path>& inputs,
                            const CorpusOptions& options, const DocumentSink& sink);

}  // namespace kintsugi::data
