#pragma once
// How text files mark document boundaries: a line consisting of exactly "<|endoftext|>" (GPT-2's
// end-of-text token, written as text) separates two documents. `kintsugi data brown` writes
// that way and `kintsugi data tokenize` turns each separator into the token id instead of
// encoding its characters; every input file also ends the document in progress.
#include <string>
#include <string_view>
#include <vector>

namespace kintsugi::data {

inline constexpr std::string_view kDocumentSeparator = "<|endoftext|>";

// The documents of a text in order, each with its own line ends and without the separator
// lines; empty documents (as between two adjacent separators) are dropped. "\r\n" line ends
// are accepted around separators.
std::vector<std::string_view> split_documents(std::string_view text);

// The inverse: documents joined by separator lines (each document should end with "\n").
std::string join_documents(const std::vector<std::string>& documents);

}  // namespace kintsugi::data
