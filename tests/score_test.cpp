// Forced decoding (Translator::score, torchmt score): a translation the search found scores as
// the search scored it, batching does not change a score, words carry their pieces' sums, and
// the command's input errors are one line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data_test_support.h"
#include "test_support.h"
#include "torchmt/decoding/forced_decoding.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/loading/model_loader.h"

namespace torchmt {
namespace {

using test::tiny_checkpoint;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

// Every hypothesis of a beam search (n-best) through force_decode on the same decoder kind: its
// log-probability and score as the search reported them, for the screened fp32 CPU projection
// and for int8.
TEST(Score, AHypothesisScoresAsTheSearchScoredIt) {
  for (const std::string dtype : {"fp32", "int8"}) {
    TranslatorConfig config;
    config.models = {tiny_checkpoint()};
    config.device = "cpu";
    config.dtype = dtype;
    Translator translator = load_translator(config);
    TranslationOptions options;
    options.search.beam_size = 4;
    options.search.nbest = 4;
    options.batch_size = 6;
    const auto lines = test::sample_lines(12);
    const auto translations = translator.translate(lines, options);
    std::vector<std::string> sources;
    std::vector<std::vector<int64_t>> targets;
    std::vector<const Hypothesis*> hypotheses;
    for (size_t i = 0; i < lines.size(); ++i)
      for (const auto& h : translations[i].hypotheses) {
        sources.push_back(lines[i]);
        targets.push_back(h.tokens);
        hypotheses.push_back(&h);
      }
    ASSERT_EQ(hypotheses.size(), lines.size() * 4) << dtype;
    const auto scores = translator.score_tokens(sources, targets, options);
    ASSERT_EQ(scores.size(), hypotheses.size());
    for (size_t i = 0; i < scores.size(); ++i) {
      EXPECT_EQ(scores[i].tokens, hypotheses[i]->tokens) << dtype << " pair " << i;
      EXPECT_EQ(scores[i].log_probs.size(), hypotheses[i]->tokens.size() + 1);
      EXPECT_NEAR(scores[i].log_prob, hypotheses[i]->log_prob, 1e-4 * (1 + std::fabs(hypotheses[i]->log_prob)))
          << dtype << " pair " << i;
      EXPECT_NEAR(scores[i].score, hypotheses[i]->score, 1e-4 * (1 + std::fabs(hypotheses[i]->score)))
          << dtype << " pair " << i;
    }
    // Another batching, another worker plan: the same scores.
    TranslationOptions one = options;
    one.batch_size = 1;
    one.workers = 2;
    const auto again = translator.score_tokens(sources, targets, one);
    for (size_t i = 0; i < scores.size(); ++i) {
      ASSERT_EQ(again[i].log_probs.size(), scores[i].log_probs.size());
      for (size_t j = 0; j < scores[i].log_probs.size(); ++j)
        EXPECT_NEAR(again[i].log_probs[j], scores[i].log_probs[j], 1e-4) << dtype << " pair " << i << " piece " << j;
    }
  }
}

TEST(Score, EmptyTargetsLongTargetsAndWords) {
  Translator translator = load_translator(tiny_checkpoint(), torch::kCPU, torch::kFloat);
  const auto& tok = translator.tgt_tokenizer();
  const std::string long_target = [] {
    std::string t;
    for (int i = 0; i < 100; ++i) t += "ein Hund läuft ";
    return t;
  }();
  const auto scores = translator.score({"Ein Hund.", "Ein Hund.", "", "Zwei Katzen."},
                                       {"", "a dog runs over the meadow", long_target, "two cats"}, TranslationOptions{});
  ASSERT_EQ(scores.size(), 4u);
  // An empty target: eos alone.
  EXPECT_TRUE(scores[0].tokens.empty());
  ASSERT_EQ(scores[0].log_probs.size(), 1u);
  EXPECT_LT(scores[0].log_prob, 0.0);
  // A target over the model's length: cut to max_positions - 1 pieces and marked.
  EXPECT_TRUE(scores[2].truncated);
  EXPECT_EQ(static_cast<int64_t>(scores[2].tokens.size()), translator.config().max_positions - 1);
  EXPECT_FALSE(scores[1].truncated);
  for (const auto& s : scores)
    for (float lp : s.log_probs) {
      EXPECT_TRUE(std::isfinite(lp));
      EXPECT_LE(lp, 0.0f);
    }
  // Words: the pieces' text split at SentencePiece's word starts, each the sum of its pieces.
  const auto words = word_scores(tok, scores[1].tokens, scores[1].log_probs);
  std::vector<std::string> texts;
  double sum = 0;
  int64_t pieces = 0;
  for (const auto& w : words) {
    texts.push_back(w.word);
    sum += w.log_prob;
    pieces += w.pieces;
    EXPECT_NEAR(w.mean_log_prob, w.log_prob / static_cast<double>(w.pieces), 1e-9);
  }
  EXPECT_EQ(texts, split("a dog runs over the meadow", ' '));
  EXPECT_EQ(pieces, static_cast<int64_t>(scores[1].tokens.size()));
  EXPECT_NEAR(sum + scores[1].log_probs.back(), scores[1].log_prob, 1e-4);
  EXPECT_THROW(translator.score({"a", "b"}, {"a"}, TranslationOptions{}), std::invalid_argument);
  EXPECT_THROW(translator.score_tokens({"a"}, {{5, translator.config().tgt_vocab_size}}, TranslationOptions{}),
               std::invalid_argument);
}

std::string tm() { return test::torchmt_binary(); }

// The command prints the library's scores; an n-best line whose text tokenizes back to the
// hypothesis's pieces scores as translate printed it.
TEST(ScoreCommand, ScoresTheNBestAsTranslatePrintedThem) {
  test::TempDir dir;
  const auto lines = test::sample_lines(8);
  {
    std::ofstream out(dir.file("in.de"));
    for (const auto& l : lines) out << l << "\n";
  }
  // On the CPU, as the library below (the commands' "auto" takes a GPU where there is one).
  const std::string model = " -m " + tiny_checkpoint() + " --dtype fp32 --device cpu -q ";
  auto nbest = test::run_command("(" + tm() + " translate" + model + "--beam 3 --nbest 3 -i " + dir.file("in.de") +
                                 " 2>/dev/null)");
  ASSERT_EQ(nbest.exit_code, 0) << nbest.output;
  // "index ||| hypothesis ||| score" lines -> a source file and a target file.
  std::ofstream src(dir.file("src.de")), tgt(dir.file("tgt.en"));
  std::vector<std::string> sources, targets;
  std::vector<double> printed;
  for (const auto& line : split(nbest.output, '\n')) {
    const auto a = line.find(" ||| "), b = line.rfind(" ||| ");
    ASSERT_NE(a, b) << line;
    sources.push_back(lines[std::stoul(line.substr(0, a))]);
    targets.push_back(line.substr(a + 5, b - a - 5));
    printed.push_back(std::stod(line.substr(b + 5)));
    src << sources.back() << "\n";
    tgt << targets.back() << "\n";
  }
  src.close();
  tgt.close();
  ASSERT_EQ(printed.size(), 24u);
  auto scored = test::run_command(tm() + " score" + model + "--src " + dir.file("src.de") + " --tgt " +
                                  dir.file("tgt.en") + " --piece-scores --word-scores -o " + dir.file("scores.tsv"));
  ASSERT_EQ(scored.exit_code, 0) << scored.output;
  EXPECT_NE(scored.output.find("scored 24 pairs"), std::string::npos) << scored.output;

  // The same translations in the library: their pieces, to know which texts tokenize back.
  TranslatorConfig config;
  config.models = {tiny_checkpoint()};
  config.device = "cpu";
  config.dtype = "fp32";
  Translator translator = load_translator(config);
  TranslationOptions options;
  options.search.beam_size = 3;
  options.search.nbest = 3;
  const auto translations = translator.translate(lines, options);
  const auto library = translator.score(sources, targets, options);
  std::ifstream in(dir.file("scores.tsv"));
  std::string row;
  size_t n = 0, round_trips = 0;
  while (std::getline(in, row)) {
    ASSERT_LT(n, printed.size());
    const auto columns = split(row, '\t');
    ASSERT_EQ(columns.size(), 6u) << row;  // score, log-prob, pieces, their scores, words, theirs
    EXPECT_EQ(split(columns[2], ' ').size(), split(columns[3], ' ').size()) << row;
    EXPECT_EQ(split(columns[2], ' ').back(), "</s>");
    EXPECT_EQ(split(columns[4], ' ').size(), split(columns[5], ' ').size()) << row;
    EXPECT_NEAR(std::stod(columns[0]), library[n].score, 2e-6) << row;
    EXPECT_NEAR(std::stod(columns[1]), library[n].log_prob, 2e-6) << row;
    const Hypothesis& h = translations[n / 3].hypotheses[n % 3];
    if (translator.tgt_tokenizer().decode(h.tokens) == targets[n] && library[n].tokens == h.tokens) {
      ++round_trips;  // printed with 6 significant digits
      EXPECT_NEAR(std::stod(columns[0]), printed[n], 1e-5 * (1 + std::fabs(printed[n]))) << row;
    }
    ++n;
  }
  EXPECT_EQ(n, printed.size());
  EXPECT_GT(round_trips, 0u);
}

// A TorchScript export scores as its checkpoint (the same steps through the export's decoder).
TEST(ScoreCommand, AnExportScoresAsItsCheckpoint) {
  test::TempDir dir;
  std::ofstream(dir.file("src.de")) << "Ein Hund läuft.\nZwei Katzen schlafen auf dem Sofa.\n\n";
  std::ofstream(dir.file("tgt.en")) << "A dog runs.\ntwo cats\nnothing\n";
  auto r = test::run_command(tm() + " export -m " + tiny_checkpoint() + " -o " + dir.file("model.ts"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::vector<std::string>> rows[2];
  const std::string models[2] = {tiny_checkpoint(), dir.file("model.ts")};
  for (int m = 0; m < 2; ++m) {
    r = test::run_command("(" + tm() + " score -m " + models[m] + " --dtype fp32 -q --piece-scores --src " +
                          dir.file("src.de") + " --tgt " + dir.file("tgt.en") + " 2>/dev/null)");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const auto& line : split(r.output, '\n')) rows[m].push_back(split(line, '\t'));
  }
  ASSERT_EQ(rows[0].size(), 3u);
  ASSERT_EQ(rows[1].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(rows[0][i].size(), 4u);
    ASSERT_EQ(rows[1][i].size(), 4u);
    EXPECT_EQ(rows[0][i][2], rows[1][i][2]);  // the same pieces
    EXPECT_NEAR(std::stod(rows[0][i][1]), std::stod(rows[1][i][1]), 1e-3) << i;
  }
}

TEST(ScoreCommand, BadInputIsOneLineAndNoOutput) {
  test::TempDir dir;
  std::ofstream(dir.file("two.de")) << "Ein Hund.\nZwei Katzen.\n";
  std::ofstream(dir.file("one.en")) << "A dog.\n";
  std::ofstream(dir.file("bad.en")) << "A dog.\nbad \xff byte\n";
  const std::string base = tm() + " score -m " + tiny_checkpoint() + " --dtype fp32 -q ";
  auto r = test::run_command(base + "--src " + dir.file("two.de") + " --tgt " + dir.file("one.en") + " -o " +
                             dir.file("out.tsv"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("one.en"), std::string::npos) << r.output;
  EXPECT_FALSE(std::ifstream(dir.file("out.tsv")).good());
  // Through a pipe the count is found at the end: still an error, still no file.
  r = test::run_command("cat " + dir.file("one.en") + " | " + base + "--src " + dir.file("two.de") +
                        " --tgt - -o " + dir.file("out.tsv"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("line counts differ"), std::string::npos) << r.output;
  EXPECT_FALSE(std::ifstream(dir.file("out.tsv")).good());
  // Invalid UTF-8: the pair is scored with U+FFFD and named (a long job is not lost for one line);
  // --strict-utf8 refuses it.
  r = test::run_command(base + "--src " + dir.file("two.de") + " --tgt " + dir.file("bad.en") + " -o " +
                        dir.file("out.tsv"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bad.en:2: invalid UTF-8 at byte 5: scored with 1 U+FFFD replacement"), std::string::npos)
      << r.output;
  EXPECT_EQ(split(test::read_text(dir.file("out.tsv")), '\n').size(), 2u);
  std::filesystem::remove(dir.file("out.tsv"));
  r = test::run_command(base + "--strict-utf8 --src " + dir.file("two.de") + " --tgt " + dir.file("bad.en") + " -o " +
                        dir.file("out.tsv"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.en:2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("UTF-8"), std::string::npos) << r.output;
  EXPECT_FALSE(std::ifstream(dir.file("out.tsv")).good());
  r = test::run_command(base + "--src " + dir.file("two.de"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--tgt"), std::string::npos) << r.output;
  r = test::run_command(base + "--src " + dir.file("missing.de") + " --tgt " + dir.file("one.en"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing.de"), std::string::npos) << r.output;
}

// A pair over the model's length is scored cut, a pair with an empty side as given, never the job
// lost, and the warnings name their lines (counted across windows) so the user can find them.
TEST(ScoreCommand, LongAndEmptyPairsAreScoredAndNamedByTheirLines) {
  test::TempDir dir;
  std::string long_target;
  for (int i = 0; i < 100; ++i) long_target += "a dog runs ";
  std::ofstream(dir.file("three.de")) << "Ein Hund.\nZwei Katzen.\nEin Mann.\n";
  std::ofstream(dir.file("three.en")) << "\nTwo cats.\n" << long_target << "\n";
  const auto r = test::run_command(tm() + " score -m " + tiny_checkpoint() + " --dtype fp32 -q --buffer-size 2 --src " +
                                   dir.file("three.de") + " --tgt " + dir.file("three.en") + " -o " + dir.file("out.tsv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(split(test::read_text(dir.file("out.tsv")), '\n').size(), 3u);
  EXPECT_NE(r.output.find("1 pair longer than the model accepts, scored cut: line 3 of " + dir.file("three.de")),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1 pair with an empty side, scored as given: line 1 of "), std::string::npos) << r.output;
}

}  // namespace
}  // namespace torchmt
