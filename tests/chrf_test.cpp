// Corpus chrF against the sacrebleu Python package, on the oracle's varied hypothesis files and
// on hand-checked cases (values printed by sacrebleu 2.6.0) that need no Python.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "test_support.h"
#include "torchmt/evaluation/chrf.h"
#include "evaluation/utf8_line_reader.h"

namespace torchmt::evaluation {
namespace {

std::vector<std::string> output_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ChrfParity, EqualsSacrebleuOnVariedHypothesisFiles) {
  const std::string oracle = test::python() + " " + test::source_dir() + "/tests/reference/sacrebleu_oracle.py";
  test::TempDir dir;
  const auto made = test::run_command(oracle + " corpus " + dir.path().string());
  ASSERT_EQ(made.exit_code, 0) << "sacrebleu must be installed for the parity tests (tools/setup.sh)\n" << made.output;
  const auto names = output_lines(made.output);
  ASSERT_GE(names.size(), 15u);
  std::string command = oracle + " score";
  for (const auto& name : names) command += " " + dir.file(name + ".hyp") + " " + dir.file(name + ".ref");
  const auto scored = test::run_command(command);
  ASSERT_EQ(scored.exit_code, 0) << scored.output;

  std::vector<double> expected(names.size(), -1.0);
  std::vector<std::string> expected_line(names.size());
  for (const auto& line : output_lines(scored.output)) {
    std::istringstream fields(line);
    std::string index, key, value;
    std::getline(fields, index, '\t'), std::getline(fields, key, '\t'), std::getline(fields, value);
    if (key == "chrf") expected.at(std::stoul(index)) = std::stod(value);
    if (key == "chrf_line") expected_line.at(std::stoul(index)) = value;
  }
  double max_difference = 0.0;
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i]);
    const ChrfScore ours =
        corpus_chrf(read_utf8_lines(dir.file(names[i] + ".hyp")), read_utf8_lines(dir.file(names[i] + ".ref")));
    const double difference = std::abs(ours.score - expected[i]);
    max_difference = std::max(max_difference, difference);
    EXPECT_LT(difference, 0.01) << ours.score << " vs " << expected[i];
    EXPECT_EQ(ours.format(), expected_line[i]);
  }
  std::cout << "[ parity   ] max |chrF ours - sacrebleu| over " << names.size() << " files: " << max_difference << "\n";
}

TEST(Chrf, CountsCodePointsNotBytes) {
  // Byte n-grams would see "ä" as two characters and give another value.
  EXPECT_DOUBLE_EQ(corpus_chrf({"äb"}, {"äc"}).score, 25.0);
  EXPECT_NEAR(corpus_chrf({"Ein Hund läuft über die Straße.", "Größe"}, {"Ein Hund lief über die Strasse.", "Grösse"}).score,
              57.386807706754674, 1e-9);
}

TEST(Chrf, IgnoresWhitespace) {
  EXPECT_DOUBLE_EQ(corpus_chrf({"a b"}, {"ab"}).score, 100.0);
  EXPECT_NEAR(corpus_chrf({"Mädchen spielen"}, {"Madchen \u00a0spielen"}).score, 83.40030340030341, 1e-9);
}

TEST(Chrf, AveragesOnlyOrdersPresentInBothSides) {
  // "ab" has no n-grams beyond order 2: sacreBLEU's default leaves orders 3..6 out of the mean.
  EXPECT_NEAR(corpus_chrf({"abcdefgh"}, {"ab"}).score, 55.00000000000001, 1e-9);
}

TEST(Chrf, EdgeCases) {
  EXPECT_DOUBLE_EQ(corpus_chrf({"a"}, {"a"}).score, 100.0);
  EXPECT_DOUBLE_EQ(corpus_chrf({"", ""}, {"Ein Hund.", "Eine Katze."}).score, 0.0);
  EXPECT_DOUBLE_EQ(corpus_chrf({"Ein Hund."}, {""}).score, 0.0);
  EXPECT_DOUBLE_EQ(corpus_chrf({}, {}).score, 0.0);
  EXPECT_EQ(corpus_chrf({"xyzzy plugh"}, {"Ein Hund läuft."}).format(), "chrF2 = 2.69");
}

TEST(Chrf, RejectsMismatchedSizesAndInvalidUtf8) {
  EXPECT_THROW(corpus_chrf({"a"}, {}), std::invalid_argument);
  EXPECT_THROW(corpus_chrf({"a"}, {std::string("\xED\xA0\x80")}), std::invalid_argument);  // a surrogate
}

TEST(Chrf, SignatureNamesTheSacrebleuSettings) {
  const std::string signature = corpus_chrf({"a"}, {"a"}).signature();
  EXPECT_EQ(signature.rfind("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:torchmt-", 0), 0u) << signature;
}

}  // namespace
}  // namespace torchmt::evaluation
