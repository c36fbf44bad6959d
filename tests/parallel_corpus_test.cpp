// Reading parallel text: plain and .gz lines, strict alignment, counted skips, and the
// encoded-corpus cache with its invalidation.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "data_test_support.h"
#include "test_support.h"
#include "data/parallel_corpus.h"
#include "data/text_file.h"
#include "util/utf8.h"
#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

using test::sample_de;
using test::sample_en;
using test::sample_tokenizer;
using test::TempDir;

void expect_same(const EncodedCorpus& a, const EncodedCorpus& b) {
  ASSERT_EQ(a.pairs.size(), b.pairs.size());
  for (size_t i = 0; i < a.pairs.size(); ++i) {
    EXPECT_EQ(a.pairs[i].index, b.pairs[i].index);
    EXPECT_EQ(a.pairs[i].src, b.pairs[i].src);
    EXPECT_EQ(a.pairs[i].tgt, b.pairs[i].tgt);
  }
  EXPECT_EQ(a.stats.summary(), b.stats.summary());
}

TEST(TextFile, ReadsPlainAndGzipAlike) {
  TempDir dir;
  test::write_text(dir.file("crlf.txt"), "eins\r\nzwei\n\ndrei");  // no final newline
  EXPECT_EQ(read_lines(dir.file("crlf.txt")), (std::vector<std::string>{"eins", "zwei", "", "drei"}));
  std::vector<std::string> lines = {"Grüße aus Köln", "", std::string(20000, 'x'), "Ende"};
  write_lines(dir.file("t.gz"), lines);
  write_lines(dir.file("t.txt"), lines);
  EXPECT_EQ(read_lines(dir.file("t.gz")), lines);
  EXPECT_EQ(read_lines(dir.file("t.txt")), lines);
  EXPECT_EQ(count_lines(dir.file("t.gz")), 4);
  EXPECT_NE(test::read_text(dir.file("t.gz")), test::read_text(dir.file("t.txt")));  // really compressed
}

TEST(TextFile, MissingFileIsNamed) {
  try {
    read_lines("/no/such/dir/train.de.gz");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/dir/train.de.gz"), std::string::npos) << e.what();
  }
}

// A NUL byte is a character like another: it must not end a line or merge the next ones.
TEST(TextFile, NulBytesAndCarriageReturnsKeepEveryLine) {
  TempDir dir;
  const std::string text = std::string("a\0b\nc\r\n\r\n\0\n", 11) + "last";
  test::write_text(dir.file("nul.txt"), text);
  const std::vector<std::string> expected = {std::string("a\0b", 3), "c", "", std::string(1, '\0'), "last"};
  EXPECT_EQ(read_lines(dir.file("nul.txt")), expected);
  EXPECT_EQ(count_lines(dir.file("nul.txt")), 5);
  std::string long_line(300000, 'x');
  long_line[150000] = '\0';
  test::write_text(dir.file("long.txt"), long_line + "\nend\n");
  EXPECT_EQ(read_lines(dir.file("long.txt")), (std::vector<std::string>{long_line, "end"}));
}

TEST(TextFile, TruncatedGzipIsAnError) {
  TempDir dir;
  std::vector<std::string> lines(2000, "Ein Satz, der sich oft wiederholt, aber nicht ganz: 12345.");
  for (size_t i = 0; i < lines.size(); ++i) lines[i] += std::to_string(i * 7919);
  write_lines(dir.file("full.gz"), lines);
  std::string bytes = test::read_text(dir.file("full.gz"));
  test::write_text(dir.file("cut.gz"), bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(read_lines(dir.file("cut.gz")), std::runtime_error);
}

TEST(TextFile, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("Straße, Öl, „Zitat“, 😀"));
  EXPECT_FALSE(is_valid_utf8("Stra\xdf" "e"));    // Latin-1 ß
  EXPECT_FALSE(is_valid_utf8("\xc3"));             // truncated sequence
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));         // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));     // UTF-16 surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\x80"));             // lone continuation byte
}

TEST(CorpusStats, SummaryFormat) {
  CorpusStats s;
  s.total = 29000;
  s.kept = 28962;
  s.too_long = 31;
  s.empty = 7;
  EXPECT_EQ(s.summary(), "kept 28,962 of 29,000 pairs: 31 too long, 7 empty, 0 invalid UTF-8");
  EXPECT_EQ(with_thousands(1234567), "1,234,567");
  EXPECT_EQ(with_thousands(999), "999");
}

TEST(LineSample, NamesTheFirstLinesAndCountsTheRest) {
  LineSample lines(3);
  EXPECT_EQ(lines.describe(), "");
  lines.add(17);
  EXPECT_EQ(lines.describe(), "line 17");
  for (int64_t n : {203, 204, 1000, 2000}) lines.add(n);
  EXPECT_EQ(lines.count(), 5);
  EXPECT_EQ(lines.describe(), "lines 17, 203, 204 and 2 more");
}

TEST(ParallelCorpus, LineCountMismatchNamesBothFilesAndCounts) {
  TempDir dir;
  auto lines = read_lines(sample_en());
  lines.pop_back();
  write_lines(dir.file("short.en.gz"), lines);
  try {
    load_parallel_corpus(sample_de(), dir.file("short.en.gz"), sample_tokenizer(), sample_tokenizer(), {});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(sample_de()), std::string::npos) << m;
    EXPECT_NE(m.find("short.en.gz"), std::string::npos) << m;
    EXPECT_NE(m.find("401"), std::string::npos) << m;
    EXPECT_NE(m.find("400"), std::string::npos) << m;
  }
}

TEST(ParallelCorpus, KeepsTheSampleInOrder) {
  auto corpus = load_parallel_corpus(sample_de(), sample_en(), sample_tokenizer(), sample_tokenizer(), {});
  const auto de = read_lines(sample_de());
  ASSERT_EQ(corpus.stats.total, static_cast<int64_t>(de.size()));
  EXPECT_EQ(corpus.stats.kept, corpus.stats.total) << corpus.stats.summary();
  ASSERT_EQ(corpus.pairs.size(), de.size());
  for (size_t i = 0; i < de.size(); i += 37) {
    EXPECT_EQ(corpus.pairs[i].index, static_cast<int64_t>(i));
    std::vector<int64_t> ids(corpus.pairs[i].src.begin(), corpus.pairs[i].src.end());
    EXPECT_EQ(sample_tokenizer().decode(ids), de[i]);
  }
}

TEST(ParallelCorpus, SkipsAndCountsBadPairs) {
  TempDir dir;
  const Tokenizer& tok = sample_tokenizer();
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += "Guten Morgen! ";
  std::vector<std::string> src = {"Guten Morgen!", "", "Bitte.", "Stra\xdf" "e", long_line, "Danke.", "   "};
  std::vector<std::string> tgt = {"Good morning!", "Nothing", "", "Street", "Hello", "Thanks.", "Blank"};
  write_lines(dir.file("s.de"), src);
  write_lines(dir.file("s.en"), tgt);
  CorpusOptions options;
  options.max_sentence_tokens = 32;
  auto corpus = load_parallel_corpus(dir.file("s.de"), dir.file("s.en"), tok, tok, options);
  EXPECT_EQ(corpus.stats.summary(), "kept 2 of 7 pairs: 1 too long, 3 empty, 1 invalid UTF-8");
  ASSERT_EQ(corpus.pairs.size(), 2u);
  EXPECT_EQ(corpus.pairs[0].index, 0);
  EXPECT_EQ(corpus.pairs[1].index, 5);

  // The limit counts the eos/bos each side carries: exactly max_sentence_tokens fits, one more does not.
  const int64_t n = static_cast<int64_t>(tok.encode(long_line).size());
  options.max_sentence_tokens = n + 1;
  EXPECT_EQ(load_parallel_corpus(dir.file("s.de"), dir.file("s.en"), tok, tok, options).stats.too_long, 0);
  options.max_sentence_tokens = n;
  EXPECT_EQ(load_parallel_corpus(dir.file("s.de"), dir.file("s.en"), tok, tok, options).stats.too_long, 1);
}

TEST(ParallelCorpus, GzipAndPlainGiveTheSameCorpus) {
  TempDir dir;
  write_lines(dir.file("de.gz"), read_lines(sample_de()));
  write_lines(dir.file("en.gz"), read_lines(sample_en()));
  const Tokenizer& tok = sample_tokenizer();
  expect_same(load_parallel_corpus(sample_de(), sample_en(), tok, tok, {}),
              load_parallel_corpus(dir.file("de.gz"), dir.file("en.gz"), tok, tok, {}));
}

TEST(ParallelCorpus, ThreadedEncodingMatchesSingleThreaded) {
  TempDir dir;
  std::vector<std::string> de, en;
  for (int copy = 0; copy < 8; ++copy) {  // enough lines to split across threads
    auto d = read_lines(sample_de()), e = read_lines(sample_en());
    de.insert(de.end(), d.begin(), d.end());
    en.insert(en.end(), e.begin(), e.end());
  }
  de[1000] = "";  // a skip in the middle of a chunk keeps the indices honest
  write_lines(dir.file("big.de"), de);
  write_lines(dir.file("big.en"), en);
  const Tokenizer& tok = sample_tokenizer();
  CorpusOptions one, four;
  one.num_threads = 1;
  four.num_threads = 4;
  auto a = load_parallel_corpus(dir.file("big.de"), dir.file("big.en"), tok, tok, one);
  auto b = load_parallel_corpus(dir.file("big.de"), dir.file("big.en"), tok, tok, four);
  EXPECT_EQ(a.stats.empty, 1);
  EXPECT_EQ(a.pairs[1000].index, 1001);
  expect_same(a, b);
}

}  // namespace
}  // namespace torchmt
