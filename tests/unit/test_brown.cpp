// Brown corpus conversion (tags dropped, English spacing and quotes rebuilt, paragraphs kept),
// the train/validation split, and the document separator convention of text files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/brown_corpus.hpp"
#include "kintsugi/data/documents.hpp"
#include "support/files.hpp"

namespace fs = std::filesystem;
using namespace kintsugi::data;
using Docs = std::vector<std::string_view>;

namespace {

using kintsugi::testing::TempDir;

// Shaped like the corpus: blank lines, a tab before each paragraph, one sentence per line,
// trailing spaces, a headline running into the next sentence, doubled sentence-final ";" and
// "?", a period after an abbreviation, punctuation moved outside closing quotes.
constexpr std::string_view kTagged =
    "\n\n\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd Friday/nr an/at "
    "investigation/nn of/in Atlanta's/np$ recent/jj primary/nn election/nn produced/vbd ``/`` "
    "no/at evidence/nn ''/'' that/cs any/dti irregularities/nns took/vbd place/nn ./.\n"
    "\n\n\t``/`` Only/rb a/at relative/jj handful/nn ''/'' ,/, the/at jury/nn said/vbd ,/, "
    "``/`` considering/in the/at widespread/jj interest/nn ''/'' ./.\n"
    "``/`` Why/wrb ''/'' ?/. ?/. ``/`` Rest/vb ''/'' ;/. ;/. ``/`` Go/vb ''/'' !/. !/.\n"
    "It/pps didn't/dod* (/( or/cc couldn't/md* )/) say/vb ;/. ;/. 1/2/cd of/in it/ppo was/bedz "
    "done/vbn :/: why/wrb ?/. ?/. \n"
    "Ask/vb Mr./np Pye/np Jr./np ./.\n"
    "\n\n\nMerger/nn-hl proposed/vbn-hl \n"
    "However/wrb ,/, he/pps said/vbd ,/, '/' Don't/do* worry/vb '/' --/-- counts/nns //in "
    "minute/nn !/.\n\n";

constexpr std::string_view kText =
    "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary "
    "election produced \"no evidence\" that any irregularities took place.\n"
    "\n"
    "\"Only a relative handful,\" the jury said, \"considering the widespread interest.\" "
    "\"Why?\" \"Rest\"; \"Go!\" "
    "It didn't (or couldn't) say; 1/2 of it was done: why? Ask Mr. Pye Jr.\n"
    "\n"
    "Merger proposed\n"
    "\n"
    "However, he said, 'Don't worry' -- counts/minute!\n";

}  // namespace

TEST(Brown, RebuildsReadableText) { EXPECT_EQ(brown_to_text(kTagged, "sample"), kText); }

TEST(Brown, EmptyInputGivesEmptyText) { EXPECT_EQ(brown_to_text("\n\n  \n", "empty"), ""); }

TEST(Brown, MalformedTokensNameFileAndLine) {
  try {
    brown_to_text("\tGood/jj\n\n\tbad token/nn\n", "cx99");
    FAIL() << "expected an error";
  } catch (const kintsugi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cx99:3: \"bad\""), std::string::npos) << e.what();
  }
}

TEST(Brown, SplitsEveryNthFileIntoValidation) {
  TempDir src, out;
  for (auto name : {"ca01", "ca02", "ca03", "cb01", "cr09"})
    src.write(name, std::string("\tText/nn of/in ") + name + "/np ./.\n");
  src.write("README", "not a corpus file");
  src.write("cats.txt", "ca01 news");
  auto split = prepare_brown(src.path, out.path, 2);
  EXPECT_EQ(split.train_files, (std::vector<std::string>{"ca01", "ca03", "cr09"}));
  EXPECT_EQ(split.val_files, (std::vector<std::string>{"ca02", "cb01"}));
  const std::string train = out.read("train.txt"), val = out.read("val.txt");
  EXPECT_EQ(train, "Text of ca01.\n<|endoftext|>\nText of ca03.\n<|endoftext|>\nText of cr09.\n");
  EXPECT_EQ(val, "Text of ca02.\n<|endoftext|>\nText of cb01.\n");
  EXPECT_EQ(split.train_bytes, train.size());
  EXPECT_EQ(split_documents(train), (Docs{"Text of ca01.\n", "Text of ca03.\n", "Text of cr09.\n"}));
}

TEST(Brown, ReportsMissingCorpus) {
  TempDir src, out;
  src.write("README", "nothing here");
  try {
    prepare_brown(src.path, out.path, 10);
    FAIL() << "expected an error";
  } catch (const kintsugi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/fetch_data.sh"), std::string::npos) << e.what();
  }
  EXPECT_THROW(prepare_brown(src.path / "absent", out.path, 10), kintsugi::Error);
  EXPECT_THROW(prepare_brown(src.path, out.path, 1), kintsugi::Error);
  EXPECT_FALSE(fs::exists(out.path / "train.txt"));
}

TEST(Documents, SplitAtSeparatorLinesOnly) {
  EXPECT_EQ(split_documents(""), Docs{});
  EXPECT_EQ(split_documents("one\n"), (Docs{"one\n"}));
  EXPECT_EQ(split_documents("a\n<|endoftext|>\nb\n<|endoftext|>\n"), (Docs{"a\n", "b\n"}));
  EXPECT_EQ(split_documents("<|endoftext|>\na"), (Docs{"a"}));
  EXPECT_EQ(split_documents("a\r\n<|endoftext|>\r\nb"), (Docs{"a\r\n", "b"}));
  EXPECT_EQ(split_documents("a\n<|endoftext|>\n<|endoftext|>\nb"), (Docs{"a\n", "b"}));
  // Only whole lines separate; inline mentions are ordinary text.
  EXPECT_EQ(split_documents("x <|endoftext|>\n<|endoftext|> y\n"),
            (Docs{"x <|endoftext|>\n<|endoftext|> y\n"}));
  EXPECT_EQ(join_documents({"a\n", "b\n"}), "a\n<|endoftext|>\nb\n");
}
