// Corpus BLEU and the 13a tokenizer against the sacrebleu Python package (the definition we
// promise to equal), plus the `torchmt evaluate` command's output and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <sstream>

#include "test_support.h"
#include "torchmt/evaluation/bleu.h"
#include "evaluation/report.h"
#include "evaluation/tokenizer_13a.h"
#include "evaluation/utf8_line_reader.h"

namespace torchmt::evaluation {
namespace {

std::string oracle_script() { return test::source_dir() + "/tests/reference/sacrebleu_oracle.py"; }

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The oracle's corpus of hypothesis/reference pairs, with sacreBLEU's scores for each.
struct OracleCorpus {
  test::TempDir dir;
  std::vector<std::string> names;
  std::map<std::string, std::map<std::string, std::string>> sacrebleu;  // name -> key -> value

  std::string hyp(const std::string& name) const { return dir.file(name + ".hyp"); }
  std::string ref(const std::string& name) const { return dir.file(name + ".ref"); }
};

// Built once per test binary (two Python runs); the files go when the binary exits.
const OracleCorpus& oracle_corpus() {
  static const std::unique_ptr<OracleCorpus> corpus = [] {
    auto c = std::make_unique<OracleCorpus>();
    const auto made = test::run_command(test::python() + " " + oracle_script() + " corpus " + c->dir.path().string());
    EXPECT_EQ(made.exit_code, 0) << "sacrebleu must be installed for the parity tests (tools/setup.sh)\n"
                                 << made.output;
    c->names = split_lines(made.output);
    std::string command = test::python() + " " + oracle_script() + " score";
    for (const auto& name : c->names) command += " " + c->hyp(name) + " " + c->ref(name);
    const auto scored = test::run_command(command);
    EXPECT_EQ(scored.exit_code, 0) << scored.output;
    for (const auto& line : split_lines(scored.output)) {
      const size_t tab1 = line.find('\t'), tab2 = line.find('\t', tab1 + 1);
      if (tab1 == std::string::npos || tab2 == std::string::npos) continue;
      const std::string& name = c->names.at(std::stoul(line.substr(0, tab1)));
      c->sacrebleu[name][line.substr(tab1 + 1, tab2 - tab1 - 1)] = line.substr(tab2 + 1);
    }
    return c;
  }();
  return *corpus;
}

TEST(BleuParity, EqualsSacrebleuOnVariedHypothesisFiles) {
  const auto& corpus = oracle_corpus();
  ASSERT_GE(corpus.names.size(), 15u);
  double max_difference = 0.0;
  for (const auto& name : corpus.names) {
    SCOPED_TRACE(name);
    const auto& expected = corpus.sacrebleu.at(name);
    EXPECT_EQ(expected.at("version"), "2.6.0") << "the oracle should be the sacrebleu release we port";
    const BleuScore ours = corpus_bleu(read_utf8_lines(corpus.hyp(name)), read_utf8_lines(corpus.ref(name)));
    const double difference = std::abs(ours.score - std::stod(expected.at("bleu")));
    max_difference = std::max(max_difference, difference);
    EXPECT_LT(difference, 0.01) << ours.format() << "\nvs\n" << expected.at("bleu_line");
    // The whole line: n-gram precisions, BP, ratio and lengths printed identically.
    EXPECT_EQ(ours.format(), expected.at("bleu_line"));
  }
  std::cout << "[ parity   ] max |BLEU ours - sacrebleu| over " << corpus.names.size()
            << " files: " << max_difference << "\n";
}

TEST(BleuParity, Tokenizer13aEqualsSacrebleuLineByLine) {
  const auto& corpus = oracle_corpus();
  for (const char* name : {"light_noise", "heavy_noise", "html_entities", "odd_whitespace", "no_diacritics"}) {
    SCOPED_TRACE(name);
    const auto tokenized = test::run_command(test::python() + " " + oracle_script() + " tokenize " + corpus.hyp(name));
    ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
    const auto expected = split_lines(tokenized.output);
    const auto lines = read_utf8_lines(corpus.hyp(name));
    ASSERT_EQ(expected.size(), lines.size());
    for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(tokenize_13a(lines[i]), expected[i]) << "line " << i + 1;
  }
}

// Expected values below were printed by sacrebleu 2.6.0; they keep these tests meaningful on a
// machine without Python.
TEST(Tokenizer13a, SplitsPunctuationButKeepsNumbersTogether) {
  EXPECT_EQ(tokenize_13a("Größe: 3,5 km."), "Größe : 3,5 km .");
  EXPECT_EQ(tokenize_13a("„Das ist‘s“, sagte er – 1.000,50 € (ca.)!"),
            "„Das ist‘s“ , sagte er – 1.000,50 € ( ca . ) !");
  EXPECT_EQ(tokenize_13a("10-20 ab-cd 3.14, e.g. U.S.A."), "10 - 20 ab-cd 3.14 , e . g . U . S . A .");
}

TEST(Tokenizer13a, UnescapesHtmlAndDropsSkippedMarker) {
  EXPECT_EQ(tokenize_13a("a&amp;quot;b &lt;x&gt;"), "a & quot ; b < x >");
  EXPECT_EQ(tokenize_13a("Hallo<skipped>Welt"), "HalloWelt");
}

TEST(Tokenizer13a, TreatsUnicodeWhitespaceAsPythonDoes) {
  EXPECT_EQ(tokenize_13a("x.\u00a0y,z"), "x . y , z");
  EXPECT_EQ(tokenize_13a("a\u3000b\u2009c\u2028d\te"), "a b c d e");
  EXPECT_EQ(tokenize_13a(""), "");
}

TEST(Tokenizer13a, RejectsInvalidUtf8) { EXPECT_THROW(tokenize_13a(std::string("caf\xC3")), std::invalid_argument); }

TEST(Bleu, MatchesSacrebleuOnAHandWorkedCorpus) {
  const BleuScore s = corpus_bleu({"Das ist ein Test.", ""}, {"Das ist ein Test.", "foo"});
  EXPECT_EQ(s.format(), "BLEU = 81.87 100.0/100.0/100.0/100.0 (BP = 0.819 ratio = 0.833 hyp_len = 5 ref_len = 6)");
  EXPECT_EQ(s.correct, (std::array<int64_t, 4>{5, 4, 3, 2}));
  EXPECT_EQ(s.total, (std::array<int64_t, 4>{5, 4, 3, 2}));
}

TEST(Bleu, PerfectMatchIsHundred) {
  const std::vector<std::string> lines = {"Ein Mann mit einem orangefarbenen Hut.", "Zwei Mädchen spielen am Strand."};
  const BleuScore s = corpus_bleu(lines, lines);
  EXPECT_NEAR(s.score, 100.0, 1e-9);
  EXPECT_DOUBLE_EQ(s.bp, 1.0);
}

TEST(Bleu, ZeroMatchesGiveZeroWithoutNaN) {
  const BleuScore s = corpus_bleu({"xyzzy plugh"}, {"Ein Hund läuft."});
  EXPECT_EQ(s.score, 0.0);
  EXPECT_EQ(s.format(), "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.368 ratio = 0.500 hyp_len = 2 ref_len = 4)");
}

TEST(Bleu, EmptyHypothesesGiveZeroLengthAndZeroBrevityPenalty) {
  const BleuScore s = corpus_bleu({"", ""}, {"Ein Hund.", "Eine Katze."});
  EXPECT_EQ(s.hyp_len, 0);
  EXPECT_EQ(s.bp, 0.0);
  EXPECT_EQ(s.score, 0.0);
  EXPECT_EQ(s.format(), "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 6)");
}

TEST(Bleu, EmptyCorpusAndEmptyReferencesDoNotDivideByZero) {
  EXPECT_EQ(corpus_bleu({}, {}).format(), "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)");
  EXPECT_EQ(corpus_bleu({"Ein Hund."}, {""}).score, 0.0);
}

TEST(Bleu, OneTokenCorpusHasNoHigherOrdersAndScoresZeroAsSacrebleuDoes) {
  EXPECT_EQ(corpus_bleu({"Ja"}, {"Ja"}).format(),
            "BLEU = 0.00 100.0/0.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 1 ref_len = 1)");
}

TEST(Bleu, RejectsMismatchedSizesAndInvalidUtf8) {
  EXPECT_THROW(corpus_bleu({"a"}, {"a", "b"}), std::invalid_argument);
  EXPECT_THROW(corpus_bleu({std::string("\xFF")}, {"a"}), std::invalid_argument);
}

TEST(Bleu, SignatureNamesTheSacrebleuSettings) {
  const std::string signature = corpus_bleu({"a"}, {"a"}).signature();
  EXPECT_EQ(signature.rfind("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:torchmt-", 0), 0u) << signature;
  EXPECT_NE(signature.find("sacrebleu-2.6.0"), std::string::npos) << signature;
}

// ---- torchmt evaluate -----------------------------------------------------------------------

std::string evaluate(const std::string& args) { return test::torchmt_binary() + " evaluate " + args; }

TEST(EvaluateCommand, PrintsSacrebleuLinesAndSignatures) {
  const auto& corpus = oracle_corpus();
  const auto r = test::run_command(evaluate("--hyp " + corpus.hyp("light_noise") + " --ref " + corpus.ref("light_noise")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = split_lines(r.output);
  ASSERT_EQ(lines.size(), 4u) << r.output;
  EXPECT_EQ(lines[0], corpus.sacrebleu.at("light_noise").at("bleu_line"));
  EXPECT_EQ(lines[1], corpus.sacrebleu.at("light_noise").at("chrf_line"));
  EXPECT_EQ(lines[2].rfind("BLEU signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("chrF2 signature: nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|", 0), 0u) << lines[3];
}

TEST(EvaluateCommand, ScoreAndPrintWritesWhatTheCommandPrints) {
  std::ostringstream out;
  EXPECT_EQ(score_and_print({"Ein Hund."}, {"Ein Hund."}, out), 0);
  EXPECT_EQ(split_lines(out.str()).at(0), "BLEU = 0.00 100.0/100.0/100.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)");
  EXPECT_EQ(split_lines(out.str()).at(1), "chrF2 = 100.00");
}

TEST(EvaluateCommand, LineCountMismatchNamesBothFilesAndCounts) {
  test::TempDir dir;
  test::write_text(dir.file("out.en"), "a\nb\n");
  test::write_text(dir.file("test.en"), "a\nb\nc\n");
  const auto r = test::run_command(evaluate("--hyp " + dir.file("out.en") + " --ref " + dir.file("test.en")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("out.en") + " has 2 lines"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir.file("test.en") + " has 3 lines"), std::string::npos) << r.output;
  EXPECT_EQ(split_lines(r.output).size(), 1u) << r.output;
}

TEST(EvaluateCommand, MissingFileIsOneLineNamingIt) {
  test::TempDir dir;
  test::write_text(dir.file("test.en"), "a\n");
  const auto r = test::run_command(evaluate("--hyp " + dir.file("nope.en") + " --ref " + dir.file("test.en")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("nope.en")), std::string::npos) << r.output;
  EXPECT_EQ(split_lines(r.output).size(), 1u) << r.output;
}

TEST(EvaluateCommand, InvalidUtf8NamesFileAndLine) {
  test::TempDir dir;
  test::write_text(dir.file("out.en"), "gut\nschlecht \xC3\x28\n");
  test::write_text(dir.file("test.en"), "gut\nschlecht\n");
  const auto r = test::run_command(evaluate("--hyp " + dir.file("out.en") + " --ref " + dir.file("test.en")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("out.en") + ":2: invalid UTF-8"), std::string::npos) << r.output;
}

TEST(EvaluateCommand, BadFlagsAreUsageErrors) {
  EXPECT_EQ(test::run_command(evaluate("--hyp a --ref b --bogus")).exit_code, 2);
  EXPECT_EQ(test::run_command(evaluate("--hyp a")).exit_code, 2);
}

}  // namespace
}  // namespace torchmt::evaluation
