#include "kintsugi/data/documents.hpp"

namespace kintsugi::data {

std::vector<std::string_view> split_documents(std::string_view text) {
  std::vector<std::string_view> documents;
  std::size_t doc_begin = 0, line_begin = 0;
  auto emit = [&](std::size_t end) {
    if (end > doc_begin) documents.push_back(text.substr(doc_begin, end - doc_begin));
  };
  while (line_begin < text.size()) {
    std::size_t newline = text.find('\n', line_begin);
    std::size_t line_end = newline == std::string_view::npos ? text.size() : newline;
    std::string_view line = text.substr(line_begin, line_end - line_begin);
    if (line.ends_with('\r')) line.remove_suffix(1);
    std::size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
    if (line == kDocumentSeparator) {
      emit(line_begin);
      doc_begin = next;
    }
    line_begin = next;
  }
  emit(text.size());
  return documents;
}

std::string join_documents(const std::vector<std::string>& documents) {
  std::string text;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    if (i > 0) {
      text += kDocumentSeparator;
      text += '\n';
    }
    text += documents[i];
  }
  return text;
}

}  // namespace kintsugi::data
