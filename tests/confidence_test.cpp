// Confidence (translate --confidence, torchmt confidence): the raw estimate is the model's own
// probabilities, a calibration fits and round-trips through its file, the measures are the
// textbook ones, and the command line's forms and errors are one line each.
#include <gtest/gtest.h>

#include <cmath>

#include "data_test_support.h"
#include "test_support.h"
#include "torchmt/decoding/confidence.h"
#include "evaluation/confidence_fit.h"
#include "torchmt/loading/model_loader.h"

namespace torchmt {
namespace {

using test::tiny_checkpoint;

TEST(Confidence, SpearmanAndAucAreTheTextbookOnes) {
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, 1e-12);
  // scipy.stats.spearmanr([1, 2, 2, 3], [1, 3, 2, 4]) = 0.9486832980505138
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 3, 2, 4}), 0.9486832980505138, 1e-12);
  EXPECT_EQ(spearman({1, 1, 1}, {1, 2, 3}), 0.0);
  EXPECT_NEAR(roc_auc({0.1, 0.2, 0.8, 0.9}, {false, false, true, true}), 1.0, 1e-12);
  EXPECT_NEAR(roc_auc({0.9, 0.8, 0.2, 0.1}, {false, false, true, true}), 0.0, 1e-12);
  // sklearn.metrics.roc_auc_score([0, 1, 0, 1, 1], [0.3, 0.3, 0.5, 0.7, 0.1]) = 2.5 / 6: of the six
  // (positive, negative) pairs one tie and two wins.
  EXPECT_NEAR(roc_auc({0.3, 0.3, 0.5, 0.7, 0.1}, {false, true, false, true, true}), 2.5 / 6, 1e-12);
  EXPECT_EQ(roc_auc({0.3, 0.4}, {true, true}), 0.5);
}

TEST(Confidence, TheRawEstimateIsTheModelsProbabilities) {
  Translator translator = load_translator(tiny_checkpoint(), torch::kCPU, torch::kFloat);
  const auto lines = test::sample_lines(5);
  const auto translations = translator.translate(lines, TranslationOptions{});
  std::vector<std::vector<int64_t>> targets;
  for (const auto& t : translations) targets.push_back(t.hypotheses.front().tokens);
  const auto scored = translator.score_tokens(lines, targets, TranslationOptions{});
  const auto raw = estimate_confidence(translator, lines, targets, TranslationOptions{}, ConfidenceModel());
  ASSERT_EQ(raw.size(), lines.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const double mean = scored[i].log_prob / static_cast<double>(scored[i].log_probs.size());
    EXPECT_NEAR(raw[i].confidence, std::exp(mean), 1e-6);
    EXPECT_EQ(raw[i].pieces, static_cast<int64_t>(targets[i].size()) + 1);
    int64_t pieces = 0;
    for (const auto& w : raw[i].words) {
      EXPECT_NEAR(w.confidence, std::exp(w.score.mean_log_prob), 1e-9);
      EXPECT_LE(w.score.min_log_prob, w.score.mean_log_prob + 1e-9);
      pieces += w.score.pieces;
    }
    EXPECT_EQ(pieces, static_cast<int64_t>(targets[i].size()));
  }
}

// The search keeps each token's log-probability (greedy, beam, a target prefix), so confidence
// needs no second decoding: they are the forced decoding's, and so is the estimate.
TEST(Confidence, TheSearchKeepsTheForcedDecodingsLogProbabilities) {
  Translator translator = load_translator(tiny_checkpoint(), torch::kCPU, torch::kFloat);
  const auto lines = test::sample_lines(6);
  for (const int64_t beam : {1, 5}) {
    for (const bool prefixed : {false, true}) {
      TranslationOptions options;
      options.search.beam_size = beam;
      std::vector<LineSteering> steering;
      if (prefixed)
        for (size_t i = 0; i < lines.size(); ++i) steering.push_back(LineSteering{i % 2 ? "A" : ""});
      const auto translations = translator.translate(lines, options, {}, steering);
      std::vector<std::vector<int64_t>> targets;
      for (const auto& t : translations) targets.push_back(t.hypotheses.front().tokens);
      const auto forced = translator.score_tokens(lines, targets, options);
      for (size_t i = 0; i < lines.size(); ++i) {
        const Hypothesis& h = translations[i].hypotheses.front();
        SCOPED_TRACE("beam " + std::to_string(beam) + (prefixed ? ", prefixed" : "") + ", line " + std::to_string(i));
        ASSERT_EQ(h.token_log_probs.size(), h.tokens.size() + 1);
        ASSERT_EQ(forced[i].log_probs.size(), h.token_log_probs.size());
        double sum = 0;
        for (size_t k = 0; k < h.token_log_probs.size(); ++k) {
          EXPECT_NEAR(h.token_log_probs[k], forced[i].log_probs[k], 1e-4) << "token " << k;
          sum += h.token_log_probs[k];
        }
        EXPECT_NEAR(sum, h.log_prob, 1e-3);
      }
      const auto from_search = rate_translations(translator, lines, translations, options, ConfidenceModel());
      const auto from_forced = estimate_confidence(translator, lines, targets, options, ConfidenceModel());
      for (size_t i = 0; i < lines.size(); ++i) {
        EXPECT_NEAR(from_search[i].confidence, from_forced[i].confidence, 1e-4);
        ASSERT_EQ(from_search[i].words.size(), from_forced[i].words.size());
        for (size_t w = 0; w < from_search[i].words.size(); ++w)
          EXPECT_NEAR(from_search[i].words[w].confidence, from_forced[i].words[w].confidence, 1e-4);
      }
    }
  }
}

// A calibration learns which way its features point, predicts in [0, 1] and survives its file.
TEST(Confidence, ACalibrationFitsAndRoundTrips) {
  const Tokenizer& tok = test::sample_tokenizer();
  std::vector<SentenceConfidence> raw;
  std::vector<std::string> hyps, refs;
  // Sentences of two words: the sure word is in the reference, the doubtful one is not.
  for (int i = 0; i < 40; ++i) {
    const auto ids = tok.encode("dog cat");
    std::vector<float> lps(ids.size() + 1, -0.05f - 0.001f * static_cast<float>(i));
    const auto cat_at = tok.encode("dog").size();
    for (size_t j = cat_at; j < ids.size(); ++j) lps[j] = -2.5f - 0.01f * static_cast<float>(i % 7);
    raw.push_back(ConfidenceModel().estimate(tok, ids, lps));
    hyps.push_back("dog cat");
    refs.push_back(i % 2 ? "the dog sleeps" : "a dog runs");
  }
  const ConfidenceModel fitted = fit_confidence(raw, hyps, refs);
  ASSERT_TRUE(fitted.calibrated());
  auto rated = raw.front();
  fitted.rate(rated);
  ASSERT_EQ(rated.words.size(), 2u);
  EXPECT_GT(rated.words[0].confidence, 0.8) << "dog: sure and in the reference";
  EXPECT_LT(rated.words[1].confidence, 0.2) << "cat: doubtful and not in the reference";
  EXPECT_GE(rated.confidence, 0.0);
  EXPECT_LE(rated.confidence, 1.0);
  const auto quality = measure_confidence(std::vector<SentenceConfidence>(40, rated), hyps, refs);
  EXPECT_NEAR(quality.word_auc, 1.0, 1e-9);
  EXPECT_EQ(quality.words_not_in_reference, 40);

  test::TempDir dir;
  fitted.save(dir.file("c.json"));
  const ConfidenceModel loaded = ConfidenceModel::load(dir.file("c.json"));
  auto again = raw.front();
  loaded.rate(again);
  EXPECT_NEAR(again.words[1].confidence, rated.words[1].confidence, 1e-12);
  EXPECT_NEAR(again.confidence, rated.confidence, 1e-12);
  // Not a calibration: one line naming the file.
  test::write_text(dir.file("bad.json"), "{\"format\": \"torchmt-confidence-1\", \"word\": {}}");
  const std::string error = test::error_of([&] { ConfidenceModel::load(dir.file("bad.json")); });
  EXPECT_EQ(error.rfind("confidence model " + dir.file("bad.json") + ": ", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
  // Too little to fit.
  EXPECT_NE(test::error_of([&] { fit_confidence({raw.begin(), raw.begin() + 5}, {hyps.begin(), hyps.begin() + 5},
                                                {refs.begin(), refs.begin() + 5}); })
                .find("too little to fit"),
            std::string::npos);
}

TEST(Confidence, WordsInTheReferenceIgnoreCaseAndPunctuation) {
  const Tokenizer& tok = test::sample_tokenizer();
  const auto ids = tok.encode("A dog runs.");
  const auto c = ConfidenceModel().estimate(tok, ids, std::vector<float>(ids.size() + 1, -0.1f));
  ASSERT_EQ(c.words.size(), 3u);
  EXPECT_EQ(words_in_reference(c, "a DOG sleeps"), (std::vector<bool>{true, true, false}));
}

TEST(Confidence, CommandLineForms) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), test::sample_lines(1)[0] + "\n\n" + test::sample_lines(2)[1] + "\n");
  const std::string base = test::torchmt_binary() + " translate -m " + tiny_checkpoint() + " -q -i " + dir.file("in.de");
  auto r = test::run_command("(" + base + " --confidence tsv 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> rows;
  for (size_t at = 0, end; (end = r.output.find('\n', at)) != std::string::npos; at = end + 1)
    rows.push_back(r.output.substr(at, end - at));
  ASSERT_EQ(rows.size(), 3u) << r.output;
  EXPECT_EQ(rows[1], "\t\t\t") << "a blank line: no estimate";
  EXPECT_EQ(std::count(rows[0].begin(), rows[0].end(), '\t'), 3) << rows[0];
  r = test::run_command("(" + base + " --confidence text --confidence-threshold 1 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[["), std::string::npos) << "every word below 1 is marked: " << r.output;
  EXPECT_NE(r.output.find(" ||| 0."), std::string::npos) << r.output;
  for (const std::string& bad : std::vector<std::string>{" --confidence xml", " --confidence tsv --nbest 2 --beam 2",
                                " --confidence-model " + dir.file("in.de") + " --confidence tsv",
                                " --confidence text --confidence-threshold 2"}) {
    r = test::run_command(base + bad + " 2>&1");
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << bad << ": " << r.output;
  }
  // `torchmt confidence` names the blank lines it leaves out of its measures, and refuses input
  // with nothing to measure.
  test::write_text(dir.file("ref.en"), "A dog.\n\nTwo dogs.\n");
  const std::string measure = test::torchmt_binary() + " confidence -m " + tiny_checkpoint() + " -q --src ";
  r = test::run_command(measure + dir.file("in.de") + " --ref " + dir.file("ref.en"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: 1 blank source line (no words to rate) left out of the measures: line 2 of"),
            std::string::npos) << r.output;
  test::write_text(dir.file("blank.de"), "\n \n");
  test::write_text(dir.file("blank.en"), "a\nb\n");
  r = test::run_command(measure + dir.file("blank.de") + " --ref " + dir.file("blank.en"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is blank: nothing to measure"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace torchmt
