// Reranking a beam with the reverse direction (--reverse-weight): each hypothesis ranks by its
// forward score plus the weighted score of the source given it, a --both-directions model is its
// own reverse model, and the commands' misuse is one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data_test_support.h"
#include "test_support.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/loading/model_loader.h"

namespace torchmt {
namespace {

Translator tiny_fp32_translator() {
  TranslatorConfig config;
  config.models = {test::tiny_checkpoint()};
  config.device = "cpu";
  config.dtype = "fp32";
  return load_translator(config);
}

// The whole beam, scored again by hand: forward score + weight x reverse score of the text,
// sorted; the rescored n-best is its head, for a reverse model of its own and for the model itself.
TEST(ReverseRescoring, RanksTheBeamByForwardPlusWeightedReverseScore) {
  Translator forward = tiny_fp32_translator();
  Translator other = test::random_translator();  // another random model: the "reverse" direction
  const double weight = 0.7;
  const auto lines = test::sample_lines(10);
  TranslationOptions beam;
  beam.search.beam_size = 4;
  beam.search.nbest = 4;
  beam.search.length_penalty = 1.0;
  const auto plain = forward.translate(lines, beam);
  for (Translator* reverse : {&other, &forward}) {
    TranslationOptions options = beam;
    options.search.nbest = 2;
    const auto rescored = translate_rescored(forward, *reverse, weight, lines, options);
    ASSERT_EQ(rescored.size(), lines.size());
    size_t reordered = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& t = plain[i];
      std::vector<std::string> sources(t.texts.size(), lines[i]);
      const auto back = reverse->score(t.texts, sources, options);
      std::vector<std::pair<double, std::string>> expected;
      for (size_t j = 0; j < t.texts.size(); ++j)
        expected.emplace_back(t.hypotheses[j].score + weight * back[j].score, t.texts[j]);
      std::stable_sort(expected.begin(), expected.end(), [](auto& a, auto& b) { return a.first > b.first; });
      ASSERT_EQ(rescored[i].texts.size(), 2u) << i;
      ASSERT_EQ(rescored[i].hypotheses.size(), 2u) << i;
      for (size_t j = 0; j < 2; ++j) {
        EXPECT_EQ(rescored[i].texts[j], expected[j].second) << "line " << i << " rank " << j;
        EXPECT_NEAR(rescored[i].hypotheses[j].score, expected[j].first, 1e-4 * (1 + std::fabs(expected[j].first)));
      }
      reordered += rescored[i].texts.front() != t.texts.front() ? 1 : 0;
    }
    // The reverse scores changed some choice: the test can tell a reranking from none.
    if (reverse == &other) {
      EXPECT_GT(reordered, 0u);
    }
  }
}

TEST(ReverseRescoring, NeedsABeamAndAModelThatKnowsTheOtherDirection) {
  Translator model = test::random_translator();
  TranslationOptions greedy;
  EXPECT_THROW(translate_rescored(model, model, 0.5, test::sample_lines(2), greedy), std::invalid_argument);
  ReverseRescoring r;
  r.weight = -1;
  EXPECT_THROW(r.validate(greedy.search), std::invalid_argument);
  r.weight = 0;
  r.reverse_model = "x.pt";
  EXPECT_THROW(r.validate(greedy.search), std::invalid_argument);
  EXPECT_NE(reverse_problem(model, nullptr), "");
  ModelLanguages both;
  both.source = "de";
  both.target = "en";
  both.both_directions = true;
  model.set_languages(both);
  EXPECT_EQ(reverse_problem(model, nullptr), "");
}

// translate --reverse-weight prints the rescored n-best; the score command gives its parts.
TEST(ReverseRescoringCommand, TranslateAndEvaluateRerankAndRefuseMisuse) {
  test::TempDir dir;
  const auto lines = test::sample_lines(6);
  {
    std::ofstream out(dir.file("in.de"));
    for (const auto& l : lines) out << l << "\n";
  }
  const std::string model = " -m " + test::tiny_checkpoint() + " --dtype fp32 --device cpu -q ";
  const std::string rescore = " --reverse-weight 0.5 --reverse-model " + test::tiny_checkpoint();
  auto r = test::run_command("(" + test::torchmt_binary() + " translate" + model + "--beam 3 --nbest 3 --lenpen 1.0" + rescore + " -i " +
                             dir.file("in.de") + " 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Translator forward = tiny_fp32_translator();
  TranslationOptions options;
  options.search.beam_size = 3;
  options.search.nbest = 3;
  options.search.length_penalty = 1.0;
  const auto expected = translate_rescored(forward, forward, 0.5, lines, options);
  std::istringstream printed(r.output);
  std::string line;
  size_t n = 0;
  while (std::getline(printed, line)) {
    ASSERT_LT(n / 3, expected.size()) << line;
    const auto& t = expected[n / 3];
    const auto a = line.find(" ||| "), b = line.rfind(" ||| ");
    ASSERT_NE(a, b) << line;
    EXPECT_EQ(line.substr(a + 5, b - a - 5), t.texts[n % 3]) << line;
    EXPECT_NEAR(std::stod(line.substr(b + 5)), t.hypotheses[n % 3].score, 1e-4) << line;
    ++n;
  }
  EXPECT_EQ(n, 18u);

  std::ofstream(dir.file("ref.en")) << std::string(6, '\n');
  r = test::run_command(test::torchmt_binary() + " evaluate" + model + "--beam 3" + rescore + " --src " + dir.file("in.de") + " --ref " +
                        dir.file("ref.en"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("BLEU"), std::string::npos) << r.output;

  // Misuse: one line naming the flag, usage exit, no output.
  const std::string io = " -i " + dir.file("in.de") + " -o " + dir.file("out.txt");
  const std::string deen = dir.file("deen.pt");
  r = test::run_command(test::torchmt_binary() + " languages -m " + test::tiny_checkpoint() + " -o " + deen +
                        " --source-language de --target-language en");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::pair<std::string, std::string> bad[] = {
      {"translate" + model + "--beam 3 --reverse-weight 0.5" + io, "--both-directions"},
      {"translate" + model + "--beam 1" + rescore + io, "--beam 2 or more"},
      {"translate" + model + "--beam 3 --reverse-weight -1" + io, "--reverse-weight must be 0 or more"},
      {"translate" + model + "--beam 3 --reverse-model " + test::tiny_checkpoint() + io, "--reverse-model"},
      {"translate" + model + "--beam 3 --split-sentences" + rescore + io, "one sentence per line"},
      {"translate" + model + "--beam 3 --reverse-weight 0.5 --reverse-model " + dir.file("missing.pt") + io,
       "missing.pt"},
      {"translate -m " + deen + " --beam 3 --reverse-weight 0.5 --reverse-model " + deen + io,
       "translates de to en, not en to de"},
      {"evaluate --hyp " + dir.file("in.de") + " --ref " + dir.file("ref.en") + " --reverse-weight 1", "-m MODEL"},
  };
  for (const auto& [args, words] : bad) {
    r = test::run_command(test::torchmt_binary() + " " + args + " 2>&1");
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(words), std::string::npos) << args << "\n" << r.output;
    EXPECT_LE(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.txt")));
}

}  // namespace
}  // namespace torchmt
