// Cleaning with no trusted models (torchmt clean): each part of the corpus is filtered by a forward
// and a backward model trained on the other parts only, the parts' outputs are joined and numbered
// as the whole corpus's lines, a later round's models learn what the round before kept, a second
// run reuses the models, and bad input ends in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "data_test_support.h"
#include "test_support.h"
#include "data/text_file.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/training/corpus_cleaning.h"

namespace torchmt {
namespace {

namespace fs = std::filesystem;

constexpr size_t kCleanPairs = 40;

std::vector<std::string> lines_of(const std::string& path) {
  LineReader reader(path);
  std::vector<std::string> lines;
  for (std::string line; reader.next(line);) lines.push_back(line);
  return lines;
}

// The first kCleanPairs sample pairs as c.de / c.en in `dir`.
void write_corpus(const std::string& dir) {
  auto de = lines_of(test::sample_de()), en = lines_of(test::sample_en());
  de.resize(kCleanPairs);
  en.resize(kCleanPairs);
  write_lines(dir + "/c.de", de);
  write_lines(dir + "/c.en", en);
}

CleanOptions clean_options(const std::string& dir) {
  CleanOptions o;
  o.filter.src = dir + "/c.de";
  o.filter.tgt = dir + "/c.en";
  o.filter.kept_src = dir + "/k.de";
  o.filter.kept_tgt = dir + "/k.en";
  o.filter.dropped = dir + "/d.tsv";
  o.filter.scores = dir + "/s.tsv";
  o.filter.keep_fraction = 0.75;
  o.filter.language_check = false;  // a 20-pair corpus teaches no language identifier
  o.training = test::tiny_run(dir + "/out");
  o.training.max_steps = 60;  // enough to know its direction, as the filter checks
  o.training.batch_tokens = 3000;
  o.training.dropout = 0.0;
  o.training.lr_factor = 0.5;
  o.training.validate_every = 1000;  // none: 60 of a 20-pair corpus's epochs
  return o;
}

TEST(Clean, EachPartIsFilteredByTheModelsTrainedOnTheOthers) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  write_corpus(d);
  const auto de = lines_of(d + "/c.de"), en = lines_of(d + "/c.en");
  const CleanSummary s = clean_corpus(clean_options(d));
  ASSERT_FALSE(s.interrupted);
  EXPECT_EQ(s.trained, 4);
  EXPECT_EQ(s.reused, 0);
  EXPECT_EQ(s.report.pairs, 40);
  EXPECT_EQ(s.report.kept, 30);  // 0.75 of each part
  ASSERT_EQ(s.thresholds.size(), 2u);

  // Part 1 is lines 1-20, its models learned lines 21-40; part 2 the other way round.
  const std::vector<std::string> first(de.begin(), de.begin() + 20), second(de.begin() + 20, de.end());
  EXPECT_EQ(lines_of(d + "/out/fold1/part.de"), first);
  EXPECT_EQ(lines_of(d + "/out/fold1/rest.de"), second);
  EXPECT_EQ(lines_of(d + "/out/fold2/part.de"), second);
  EXPECT_EQ(lines_of(d + "/out/fold2/rest.de"), first);
  for (const char* fold : {"fold1", "fold2"}) {
    const std::string run = d + "/out/" + fold;
    std::string config;
    for (const auto& l : lines_of(run + "/forward/config.yaml")) config += l + "\n";
    EXPECT_NE(config.find("train_src: " + run + "/rest.de"), std::string::npos) << config;
    const Translator forward = load_translator(run + "/forward/checkpoint_last.pt", torch::kCPU, torch::kFloat);
    const Translator backward = load_translator(run + "/backward/checkpoint_last.pt", torch::kCPU, torch::kFloat);
    EXPECT_EQ(forward.languages().source, "de");
    EXPECT_EQ(forward.languages().target, "en");
    EXPECT_EQ(backward.languages().source, "en");
    EXPECT_EQ(backward.languages().target, "de");
  }

  // The joined outputs: every pair kept or dropped, numbered as a line of the whole corpus.
  const auto kept_de = lines_of(d + "/k.de"), kept_en = lines_of(d + "/k.en"), dropped = lines_of(d + "/d.tsv");
  ASSERT_EQ(kept_de.size(), 30u);
  ASSERT_EQ(dropped.size(), 10u);
  // Contrasted scores unless told otherwise: score = exp(D_f + D_b).
  const auto score_rows = lines_of(d + "/s.tsv");
  ASSERT_EQ(score_rows.size(), 40u);
  for (const auto& row : score_rows) {
    std::istringstream cells(row);
    double score = 0, df = 0, db = 0;
    cells >> score >> df >> db;
    EXPECT_NEAR(score, std::exp(df + db), 1e-4 * std::max(1.0, score)) << row;
  }
  std::vector<bool> was_dropped(kCleanPairs, false);
  int64_t in_second = 0;
  for (const auto& row : dropped) {
    const size_t line = std::stoul(row.substr(0, row.find('\t')));
    ASSERT_TRUE(line >= 1 && line <= kCleanPairs) << row;
    EXPECT_NE(row.find("\t" + de[line - 1] + "\t" + en[line - 1]), std::string::npos) << row;
    was_dropped[line - 1] = true;
    in_second += line > 20;
  }
  EXPECT_EQ(in_second, 5);
  std::vector<std::string> expected_de, expected_en;
  for (size_t i = 0; i < kCleanPairs; ++i)
    if (!was_dropped[i]) {
      expected_de.push_back(de[i]);
      expected_en.push_back(en[i]);
    }
  EXPECT_EQ(kept_de, expected_de);
  EXPECT_EQ(kept_en, expected_en);

  // Again: the models are reused, the outputs the same.
  const CleanSummary again = clean_corpus(clean_options(d));
  EXPECT_EQ(again.trained, 0);
  EXPECT_EQ(again.reused, 4);
  EXPECT_EQ(lines_of(d + "/k.de"), kept_de);
  EXPECT_EQ(lines_of(d + "/d.tsv"), dropped);

  // Another corpus into the same directory: refused, nothing mixed.
  auto changed = de;
  changed[3] = "Ein anderer Satz.";
  write_lines(d + "/c.de", changed);
  try {
    clean_corpus(clean_options(d));
    FAIL() << "a directory of other models was used";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds models trained on another corpus or other --folds"), std::string::npos)
        << e.what();
  }
}

TEST(Clean, ALaterRoundTrainsOnWhatTheRoundBeforeKeptAndFiltersEveryPairAgain) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  write_corpus(d);
  const auto de = lines_of(d + "/c.de");
  CleanOptions o = clean_options(d);
  o.rounds = 2;
  const CleanSummary s = clean_corpus(o);
  ASSERT_FALSE(s.interrupted);
  EXPECT_EQ(s.trained, 8);
  EXPECT_EQ(s.report.pairs, 40) << "the last round filters the whole corpus, not what the first kept";
  EXPECT_EQ(s.report.kept, 30);
  ASSERT_EQ(s.thresholds.size(), 2u);

  // Round 2's part 1 models learned what round 1 kept of part 2, and the other way round.
  const std::string out = d + "/out";
  for (const char* suffix : {"de", "en"}) {
    EXPECT_EQ(lines_of(out + "/round2/fold1/rest." + suffix), lines_of(out + "/fold2/kept." + suffix));
    EXPECT_EQ(lines_of(out + "/round2/fold2/rest." + suffix), lines_of(out + "/fold1/kept." + suffix));
  }
  EXPECT_EQ(lines_of(out + "/round2/fold1/rest.de").size(), 15u);
  std::string config;
  for (const auto& l : lines_of(out + "/round2/fold1/backward/config.yaml")) config += l + "\n";
  EXPECT_NE(config.find("train_src: " + out + "/round2/fold1/rest.en"), std::string::npos) << config;
  // The outputs are round 2's, each of its dropped rows a line of the whole corpus.
  auto joined = lines_of(out + "/round2/fold1/kept.de");
  for (const auto& l : lines_of(out + "/round2/fold2/kept.de")) joined.push_back(l);
  EXPECT_EQ(lines_of(d + "/k.de"), joined);
  for (const auto& row : lines_of(d + "/d.tsv")) {
    const size_t line = std::stoul(row.substr(0, row.find('\t')));
    ASSERT_TRUE(line >= 1 && line <= kCleanPairs) << row;
    EXPECT_NE(row.find("\t" + de[line - 1] + "\t"), std::string::npos) << row;
  }

  const CleanSummary again = clean_corpus(o);
  EXPECT_EQ(again.trained, 0);
  EXPECT_EQ(again.reused, 8);
  EXPECT_EQ(lines_of(d + "/k.de"), joined);

  // Round 1 keeps other pairs now: round 2's models learned the old ones, and are not used.
  o.filter.keep_fraction = 0.5;
  try {
    clean_corpus(o);
    FAIL() << "round 2's models were used for other training pairs";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(out + "/round2's models learned other pairs than round 1 of 2 keeps now"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(lines_of(d + "/k.de"), joined) << "the outputs stay the last finished run's";

  // A record cut short is damaged, and says what to remove.
  o.filter.keep_fraction = 0.75;
  write_lines(out + "/round2/round.json", {"{\"key\": "});
  try {
    clean_corpus(o);
    FAIL() << "a damaged record was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(out + "/round2/round.json is damaged ("), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("remove " + out + "/round2 to train its models again"), std::string::npos)
        << e.what();
  }
}

TEST(Clean, AStoppedRunGoesOnWithTheModelsNotYetFinished) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  write_corpus(d);
  TrainHooks hooks;
  // A stop while fold 1's backward model trains (its run's first en -> de line).
  hooks.on_progress = [](int64_t, const std::string& line) {
    if (line.find("en -> de") != std::string::npos) request_training_stop();
  };
  const CleanSummary first = clean_corpus(clean_options(d), hooks);
  EXPECT_TRUE(first.interrupted);
  EXPECT_TRUE(fs::exists(d + "/out/fold1/forward/done.json"));
  EXPECT_FALSE(fs::exists(d + "/out/fold1/backward/done.json"));
  EXPECT_FALSE(fs::exists(d + "/out/fold2/forward"));
  EXPECT_FALSE(fs::exists(d + "/k.de")) << "no output before every model is trained";
  const CleanSummary second = clean_corpus(clean_options(d));
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(second.reused, 1);
  EXPECT_EQ(second.trained, 3);
  EXPECT_EQ(lines_of(d + "/k.de").size(), 30u);
}

TEST(Clean, CommandTrainsOneVocabularyAndTakesTheValidationPairsAsReference) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  write_corpus(d);
  auto de = lines_of(test::sample_de()), en = lines_of(test::sample_en());
  write_lines(d + "/v.de", std::vector<std::string>(de.begin() + 50, de.begin() + 60));
  write_lines(d + "/v.en", std::vector<std::string>(en.begin() + 50, en.begin() + 60));
  const auto r = test::run_command(test::torchmt_binary() + " clean --src " + d + "/c.de --tgt " + d + "/c.en" +
                                   " --kept-src " + d + "/k.de --kept-tgt " + d + "/k.en --valid-src " + d +
                                   "/v.de --valid-tgt " + d + "/v.en --preset tiny --vocab-size 400 --max-steps 60" +
                                   " --batch-tokens 3000 --dropout 0 --warmup 50 --lr-factor 0.5 --validate-every 1000 --threads 1" +
                                   " --dtype fp32 --device cpu --language-check=false" +
                                   " --out " + d + "/out 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(d + "/out/spm.model")) << r.output;
  EXPECT_NE(r.output.find("clean: kept "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("models trained by this run 4, by an earlier one 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the 0.97 quantile of 10 reference pairs' scores"), std::string::npos) << r.output;
  // Every model reads the one vocabulary.
  const auto checksum = Tokenizer::load(d + "/out/spm.model").checksum();
  for (const char* model : {"fold1/forward", "fold1/backward", "fold2/forward", "fold2/backward"})
    EXPECT_EQ(load_translator(d + "/out/" + model + "/checkpoint_last.pt", torch::kCPU, torch::kFloat)
                  .src_tokenizer()
                  .checksum(),
              checksum)
        << model;
  EXPECT_EQ(lines_of(d + "/k.de").size(), lines_of(d + "/k.en").size());
}

TEST(Clean, BadOptionsAndFilesAreOneLineErrors) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  write_corpus(d);
  auto de = lines_of(d + "/c.de");
  de.pop_back();
  write_lines(d + "/short.de", de);
  write_lines(d + "/three.de", {"a", "b", "c"});
  write_lines(d + "/three.en", {"a", "b", "c"});
  const std::string tm = test::torchmt_binary() + " clean --preset tiny --threads 1 --device cpu --out " + d + "/out ";
  const std::string kept = " --kept-src " + d + "/k.de --kept-tgt " + d + "/k.en";
  const std::string corpus = " --src " + d + "/c.de --tgt " + d + "/c.en" + kept;
  struct Case {
    std::string args, expected;
    int code;
  };
  const std::vector<Case> cases = {
      {corpus + " --max-score 2 --folds 1", "--folds must be at least 2", 2},
      {corpus + " --max-score 2 --rounds 0", "--rounds must be at least 1", 2},
      {corpus, "give the threshold's clean reference pairs: --valid-src/--valid-tgt", 2},
      {corpus + " --max-score 2 --both-directions", "--both-directions: clean trains a model for each direction", 2},
      {kept + " --max-score 2", "give the corpus: --src and --tgt", 2},
      {" --src " + d + "/short.de --tgt " + d + "/c.en" + kept + " --max-score 2", "line counts differ", 1},
      {" --src " + d + "/three.de --tgt " + d + "/three.en" + kept + " --max-score 2 --folds 2",
       "has 3 lines: too few for --folds 2", 1},
      {" --src " + d + "/none.de --tgt " + d + "/c.en" + kept + " --max-score 2", "--src " + d + "/none.de: file not found",
       1},
      {corpus + " --max-score 2 --train-src " + d + "/c.de", "train-src", 2},
      {corpus + " --keep-fraction 1.5", "--keep-fraction must be in (0, 1]", 2},
  };
  for (const auto& c : cases) {
    const auto r = test::run_command(tm + c.args + " 2>&1");
    EXPECT_EQ(r.exit_code, c.code) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_FALSE(fs::exists(d + "/k.de")) << "nothing written on an error";
  EXPECT_FALSE(fs::exists(d + "/out/fold1")) << "nothing trained on an error";
}

}  // namespace
}  // namespace torchmt
