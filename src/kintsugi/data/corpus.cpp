#include "kintsugi/data/corpus.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <variant>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/documents.hpp"
#include "kintsugi/data/jsonl.hpp"
#include "kintsugi/data/read_file.hpp"
#include "kintsugi/data/utf8.hpp"

namespace kintsugi::data {
namespace {

// One document to encode: a stretch of a text file, or a JSONL record still to be parsed (the
// workers parse, so that JSON decoding runs in parallel too).
using Job = std::variant<std::string_view, JsonlRecord>;

class Batch {
 public:
  Batch(const Tokenizer& tokenizer, const CorpusOptions& options, int threads)
      : tokenizer_(tokenizer), options_(options), threads_(threads) {}

  void add(Job job, std::size_t bytes) {
    jobs_.push_back(job);
    bytes_ += bytes;
  }
  bool full() const { return bytes_ >= options_.batch_bytes; }

  // Encodes the jobs on the worker threads, then hands the results to `sink` in order.
  void run(const std::string& file, const DocumentSink& sink, CorpusStats& stats) {
    results_.assign(jobs_.size(), {});
    errors_.assign(jobs_.size(), {});
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < jobs_.size();) {
        try {
          if (const auto* text = std::get_if<std::string_view>(&jobs_[i])) {
            tokenizer_.encode_document(*text, results_[i]);
          } else {
            const std::string record =
                jsonl_text(std::get<JsonlRecord>(jobs_[i]), options_.key, file);
            if (!record.empty()) tokenizer_.encode_document(record, results_[i]);
          }
        } catch (const Error& e) {
          errors_[i] = e.what();
        }
      }
    };
    std::vector<std::thread> workers;
    for (int t = 1; t < threads_ && static_cast<std::size_t>(t) < jobs_.size(); ++t)
      workers.emplace_back(work);
    work();
    for (auto& w : workers) w.join();
    for (std::size_t i = 0; i < jobs_.size(); ++i) {
      if (!errors_[i].empty()) throw Error(errors_[i]);
      if (results_[i].empty()) continue;  // an empty JSONL text
      sink(results_[i]);
      ++stats.documents;
      stats.tokens += static_cast<std::int64_t>(results_[i].size());
    }
    jobs_.clear();
    bytes_ = 0;
  }

 private:
  const Tokenizer& tokenizer_;
  const CorpusOptions& options_;
  const int threads_;
  std::vector<Job> jobs_;
  std::size_t bytes_ = 0;
  std::vector<std::vector<std::int32_t>> results_;
  std::vector<std::string> errors_;
};

}  // namespace

CorpusStats tokenize_corpus(const Tokenizer& tokenizer,
                            const std::vector<std::filesystem::path>& inputs,
                            const CorpusOptions& options, const DocumentSink& sink) {
  const auto start = std::chrono::steady_clock::now();
  CorpusStats stats;
  stats.threads = options.threads > 0 ? options.threads
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  Batch batch(tokenizer, options, stats.threads);
  for (const auto& input : inputs) {
    const std::string name = input.string();
    const std::string contents = read_file(input, "check the input file names");
    stats.bytes += contents.size();
    if (options.jsonl) {
      for (const JsonlRecord& record : jsonl_records(contents)) {
        batch.add(record, record.line.size());
        if (batch.full()) batch.run(name, sink, stats);
      }
    } else {
      require_utf8(contents, name);
      for (std::string_view document : split_documents(contents)) {
        batch.add(document, document.size());
        if (batch.full()) batch.run(name, sink, stats);
      }
    }
    batch.run(name, sink, stats);  // the contents go out of scope with this file
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace kintsugi::data
