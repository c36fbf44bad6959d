// Corpus cleaning (torchmt filter): the dual conditional cross-entropy is the paper's formula over
// forced decoding both ways, the command drops the pairs two models find improbable and reports
// the ones it cannot score, and models in the wrong roles are refused in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "data_test_support.h"
#include "test_support.h"
#include "data/text_file.h"
#include "evaluation/dual_cross_entropy.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/training/trainer.h"

namespace torchmt {
namespace {

constexpr size_t kPairs = 40;

// Every line of a file (a name of its own: the unity build joins this file with others).
std::vector<std::string> file_lines(const std::string& path) {
  LineReader reader(path);
  std::vector<std::string> lines;
  for (std::string line; reader.next(line);) lines.push_back(line);
  return lines;
}

// Tiny models that know the first kPairs sample pairs by heart, one each way: trained once for
// all the Filter tests (test::shared_fixture).
struct Memorised {
  std::string de, en, deen, ende;
  Memorised() {
    const std::string dir = test::shared_fixture("filter_memorised", [](const std::string& d) {
      auto de_lines = file_lines(test::sample_de()), en_lines = file_lines(test::sample_en());
      de_lines.resize(kPairs);
      en_lines.resize(kPairs);
      write_lines(d + "/s.de", de_lines);
      write_lines(d + "/s.en", en_lines);
      for (auto [src, tgt, out] : {std::make_tuple("s.de", "s.en", "deen"), std::make_tuple("s.en", "s.de", "ende")}) {
        TrainOptions o = test::tiny_run(d + "/" + out, d + "/" + src, d + "/" + tgt);
        o.label_smoothing = 0.0;
        o.max_steps = 200;
        o.lr_factor = 0.5;  // as Trainer.OverfitsThirtyPairs: at 1.0 a pair was left unlearnt by some roundings
        o.dropout = 0.0;
        o.batch_tokens = 3000;  // the whole corpus in one batch
        Trainer(o).run();
      }
    });
    de = dir + "/s.de";
    en = dir + "/s.en";
    deen = dir + "/deen/checkpoint_last.pt";
    ende = dir + "/ende/checkpoint_last.pt";
  }
};

const Memorised& memorised() {
  static const Memorised m;
  return m;
}

// The memorised models and six of their pairs, the last three with one another's targets.
struct SixPairs {
  Translator f, b;
  std::vector<std::string> de, en;
};
SixPairs six_pairs_three_wrong() {
  const auto& m = memorised();
  SixPairs p{load_translator(m.deen, torch::kCPU, torch::kFloat), load_translator(m.ende, torch::kCPU, torch::kFloat),
             file_lines(m.de), file_lines(m.en)};
  p.de.resize(6);
  p.en.resize(6);
  std::rotate(p.en.begin() + 3, p.en.begin() + 4, p.en.end());  // pairs 3..5 wrong
  return p;
}

TEST(Filter, DualCrossEntropyIsThePapersFormula) {
  auto [f, b, de, en] = six_pairs_three_wrong();
  const auto dual = dual_cross_entropy(f, b, de, en, TranslationOptions{});
  const auto fs = f.score(de, en, TranslationOptions{}), bs = b.score(en, de, TranslationOptions{});
  for (size_t i = 0; i < de.size(); ++i) {
    const double hf = -fs[i].log_prob / static_cast<double>(fs[i].log_probs.size());
    const double hb = -bs[i].log_prob / static_cast<double>(bs[i].log_probs.size());
    EXPECT_NEAR(dual[i].forward, hf, 1e-9);
    EXPECT_NEAR(dual[i].backward, hb, 1e-9);
    EXPECT_NEAR(dual[i].score, std::fabs(hf - hb) + (hf + hb) / 2, 1e-9);
  }
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 3; j < 6; ++j) EXPECT_LT(dual[i].score, dual[j].score) << "clean " << i << " vs wrong " << j;
  const auto along = check_direction(f, de, en, TranslationOptions{});
  EXPECT_TRUE(along.agrees()) << along.along << " vs " << along.against;
  EXPECT_FALSE(check_direction(b, de, en, TranslationOptions{}).agrees());
}

TEST(Filter, ContrastMeasuresEachSideAgainstAnotherPairsSide) {
  const auto& m = memorised();
  auto [f, b, de, en] = six_pairs_three_wrong();
  ContrastSides sides;
  for (size_t i = 0; i < de.size(); ++i) {
    sides.sources.push_back(de[(i + 2) % 6]);
    sides.targets.push_back(en[(i + 2) % 6]);
  }
  const auto contrasted = dual_cross_entropy(f, b, de, en, TranslationOptions{}, {}, &sides);
  const auto plain = dual_cross_entropy(f, b, de, en, TranslationOptions{});
  const auto fc = f.score(sides.sources, en, TranslationOptions{}), bc = b.score(sides.targets, de, TranslationOptions{});
  for (size_t i = 0; i < de.size(); ++i) {
    const double df = plain[i].forward + fc[i].log_prob / static_cast<double>(fc[i].log_probs.size());
    const double db = plain[i].backward + bc[i].log_prob / static_cast<double>(bc[i].log_probs.size());
    EXPECT_NEAR(contrasted[i].forward, df, 1e-9);
    EXPECT_NEAR(contrasted[i].backward, db, 1e-9);
    EXPECT_NEAR(contrasted[i].score, std::exp(df + db), 1e-9 * std::max(1.0, contrasted[i].score));
  }
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 3; j < 6; ++j)
      EXPECT_LT(contrasted[i].score, contrasted[j].score) << "clean " << i << " vs wrong " << j;

  // The command: 8 targets of other sentences among 80 clean pairs (the 40 twice) are among the 10
  // worst (tiny models: not all 8 the worst), whether the contrasting pairs come from the batch or,
  // one pair a batch after the first 64 lines, from the pairs scored before.
  test::TempDir dir;
  de = file_lines(m.de);
  en = file_lines(m.en);
  const auto clean_de = de, clean_en = en;
  for (size_t i = 0; i < 8; ++i) {
    de.push_back(clean_de[i]);
    en.push_back(clean_en[(i + 3) % kPairs]);
  }
  de.insert(de.end(), clean_de.begin(), clean_de.end());
  en.insert(en.end(), clean_en.begin(), clean_en.end());
  write_lines(dir.file("c.de"), de);
  write_lines(dir.file("c.en"), en);
  const std::string base = test::torchmt_binary() + " filter -q --threads 1 -m " + m.deen + " --backward-model " +
                           m.ende + " --kept-src " + dir.file("k.de") + " --kept-tgt " + dir.file("k.en") +
                           " --contrast --keep-fraction 0.91";
  for (const char* buffer : {"4096", "1"}) {
    const auto r = test::run_command(base + " --src " + dir.file("c.de") + " --tgt " + dir.file("c.en") +
                                     " --buffer-size " + buffer + " --scores " + dir.file("s.tsv") + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(file_lines(dir.file("k.en")).size(), 80u);
    const auto rows = file_lines(dir.file("s.tsv"));
    ASSERT_EQ(rows.size(), 88u);
    std::vector<std::pair<double, size_t>> ranked;
    std::vector<double> clean;
    for (size_t i = 0; i < rows.size(); ++i) {
      ranked.emplace_back(std::stod(rows[i]), i);
      if (i < 40 || i >= 48) clean.push_back(ranked.back().first);
    }
    std::sort(ranked.begin(), ranked.end());
    std::sort(clean.begin(), clean.end());
    EXPECT_LT(clean[clean.size() / 2], 0.1) << "a memorised pair is likelier with its own sides";
    for (size_t k = 0; k < 78; ++k)
      EXPECT_FALSE(ranked[k].second >= 40 && ranked[k].second < 48)
          << "buffer " << buffer << ": line " << ranked[k].second + 1 << " of another sentence ranks " << k + 1;
  }
  // Nothing unrelated to contrast with: one line.
  write_lines(dir.file("same.de"), {de[0], de[0]});
  write_lines(dir.file("same.en"), {en[0], en[0]});
  const auto r = test::run_command(base + " --src " + dir.file("same.de") + " --tgt " + dir.file("same.en") + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--contrast: " + dir.file("same.de") + " has no two pairs that can be scored with different text"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(Filter, CommandKeepsTheCleanPairsAndReportsTheRest) {
  const auto& m = memorised();
  test::TempDir dir;
  auto de = file_lines(m.de), en = file_lines(m.en);
  // 8 targets of other sentences, one empty target, one source of invalid UTF-8.
  for (size_t i = 0; i < 8; ++i) {
    de.push_back(de[i]);
    en.push_back(en[(i + 3) % kPairs]);
  }
  de.push_back(de[9]);
  en.push_back("");
  de.push_back("Ein \xff Hund");
  en.push_back(en[10]);
  write_lines(dir.file("c.de"), de);
  write_lines(dir.file("c.en"), en);
  const std::string base = test::torchmt_binary() + " filter -q --threads 1 -m " + m.deen + " --backward-model " +
                           m.ende + " --src " + dir.file("c.de") + " --tgt " + dir.file("c.en") + " --kept-src " +
                           dir.file("k.de") + " --kept-tgt " + dir.file("k.en");
  auto r = test::run_command(base + " --max-score 1.0 --dropped " + dir.file("d.tsv") + " --scores " +
                             dir.file("s.tsv") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kept 40 of 50 pairs (dropped 8 scoring above 1, 2 that could not be scored"),
            std::string::npos)
      << r.output;
  const auto kept_de = file_lines(dir.file("k.de")), kept_en = file_lines(dir.file("k.en"));
  EXPECT_EQ(kept_de, std::vector<std::string>(de.begin(), de.begin() + kPairs));
  EXPECT_EQ(kept_en, std::vector<std::string>(en.begin(), en.begin() + kPairs));
  const auto dropped = file_lines(dir.file("d.tsv"));
  ASSERT_EQ(dropped.size(), 10u);
  EXPECT_EQ(dropped[0].rfind("41\t", 0), 0u) << dropped[0];
  EXPECT_NE(dropped[0].find("\tscore\t"), std::string::npos) << dropped[0];
  EXPECT_EQ(dropped[8].rfind("49\t\t\t\tempty\t", 0), 0u) << dropped[8];
  EXPECT_EQ(dropped[9].rfind("50\t\t\t\tinvalid UTF-8\tEin \xef\xbf\xbd Hund\t", 0), 0u) << dropped[9];
  EXPECT_EQ(file_lines(dir.file("s.tsv")).size(), 50u);
  // The best half of the 48 scored pairs.
  r = test::run_command(base + " --keep-fraction 0.5 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(file_lines(dir.file("k.de")).size(), 24u);

  // A threshold from clean reference pairs: their scores' quantile (here the memorised pairs, scored alone).
  r = test::run_command(test::torchmt_binary() + " filter -q --threads 1 -m " + m.deen + " --backward-model " + m.ende +
                        " --src " + m.de + " --tgt " + m.en + " --kept-src " + dir.file("r.de") + " --kept-tgt " +
                        dir.file("r.en") + " --max-score 1000 --scores " + dir.file("r.tsv") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> reference;
  for (const auto& line : file_lines(dir.file("r.tsv"))) reference.push_back(std::stod(line));
  std::sort(reference.begin(), reference.end());
  const std::string quiet_flag = " -q ";
  std::string loud = base;
  loud.replace(loud.find(quiet_flag), quiet_flag.size(), " ");
  r = test::run_command(loud + " --reference-src " + m.de + " --reference-tgt " + m.en + " --reference-quantile 0.5 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("filter: --max-score ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", the 0.5 quantile of 40 reference pairs' scores"), std::string::npos) << r.output;
  const double threshold = std::stod(r.output.substr(at + 20));
  EXPECT_NEAR(threshold, reference[20], 1e-4 * std::max(1.0, std::fabs(reference[20])));

  // A pair over a model's length is scored cut and named by its line.
  std::vector<std::string> few_de(de.begin(), de.begin() + 5), few_en(en.begin(), en.begin() + 5);
  std::string long_side;
  for (int i = 0; i < 100; ++i) long_side += few_en[0] + " ";
  few_de.push_back(few_de[0]);
  few_en.push_back(long_side);
  write_lines(dir.file("l.de"), few_de);
  write_lines(dir.file("l.en"), few_en);
  r = test::run_command(test::torchmt_binary() + " filter -q --threads 1 -m " + m.deen + " --backward-model " + m.ende +
                        " --src " + dir.file("l.de") + " --tgt " + dir.file("l.en") + " --kept-src " + dir.file("lk.de") +
                        " --kept-tgt " + dir.file("lk.en") + " --max-score 1000 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 pair with a side longer than a model accepts, scored cut: line 6 of " + dir.file("l.de")),
            std::string::npos)
      << r.output;
}

TEST(Filter, RealignRePairsTheDroppedSourcesWithTheTargetsThatTranslateThem) {
  const auto& m = memorised();
  test::TempDir dir;
  auto de = file_lines(m.de), en = file_lines(m.en);
  const auto clean_de = de, clean_en = en;
  // The last 10 targets shifted among their pairs (a corpus whose lines slipped), then a pair whose
  // target is its own source (nothing to re-pair it with).
  std::rotate(en.begin() + 30, en.begin() + 31, en.end());
  de.push_back(de[5]);
  en.push_back(de[5]);
  write_lines(dir.file("c.de"), de);
  write_lines(dir.file("c.en"), en);
  const std::string base = test::torchmt_binary() + " filter -q --threads 1 -m " + m.deen + " --backward-model " +
                           m.ende + " --src " + dir.file("c.de") + " --tgt " + dir.file("c.en") + " --kept-src " +
                           dir.file("k.de") + " --kept-tgt " + dir.file("k.en") + " --max-score 1.0";
  // The copy is dropped for its language, unscored (models trained on copies find them probable).
  auto r = test::run_command(base + " --dropped " + dir.file("d.tsv") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kept 30 of 41 pairs (dropped 10 scoring above 1, 0 that could not be scored: empty or "
                          "invalid UTF-8, 1 in the wrong language)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(file_lines(dir.file("k.de")).size(), 30u);
  EXPECT_EQ(file_lines(dir.file("d.tsv")).back().rfind("41\t\t\t\ttarget in German\t", 0), 0u);
  r = test::run_command(base + " --language-check=false 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kept 30 of 41 pairs (dropped 11 scoring above 1, 0 that could not be scored: empty or "
                          "invalid UTF-8)"),
            std::string::npos)
      << r.output;

  r = test::run_command(base + " --realign --realign-quantile 1 --realigned " + dir.file("r.tsv") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kept 30 of 41 pairs (dropped 10 scoring above 1, 0 that could not be scored: empty or "
                          "invalid UTF-8, 1 in the wrong language) and 10 dropped sources with the target of another "
                          "dropped line"),
            std::string::npos)
      << r.output;
  // Each source at its line, with its own target again.
  EXPECT_EQ(file_lines(dir.file("k.de")), clean_de);
  EXPECT_EQ(file_lines(dir.file("k.en")), clean_en);
  const auto realigned = file_lines(dir.file("r.tsv"));
  ASSERT_EQ(realigned.size(), 10u);
  EXPECT_EQ(realigned[0].rfind("31\t40\t", 0), 0u) << realigned[0];  // line 31's target had slipped to line 40
  EXPECT_EQ(realigned[9].rfind("40\t39\t", 0), 0u) << realigned[9];
  for (const auto& line : realigned) EXPECT_LE(std::stod(line.substr(line.find('\t', 3) + 1)), 1.0) << line;

  // A re-paired pair must score as well as the kept pairs' quantile: at 0.1, as the best tenth.
  std::string loud = base;
  loud.replace(loud.find(" -q "), 4, " ");
  r = test::run_command(loud + " --realign --realign-quantile 0.1 --realigned " + dir.file("r.tsv") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("filter: --realign keeps re-paired pairs scoring at most ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", the 0.1 quantile of the kept pairs' scores"), std::string::npos) << r.output;
  const double accept = std::stod(r.output.substr(at + 56));
  const auto strict = file_lines(dir.file("r.tsv"));
  EXPECT_LT(strict.size(), 10u);
  for (const auto& line : strict) EXPECT_LE(std::stod(line.substr(line.find('\t', 3) + 1)), accept) << line;
}

TEST(Filter, LengthQuantileDropsASideCutShortAndHoldsRePairedPairsToIt) {
  const auto& m = memorised();
  test::TempDir dir;
  auto de = file_lines(m.de), en = file_lines(m.en);
  // Four pairs of six words or more with their target cut to its first word (a truncated line).
  for (size_t i = 0; de.size() < kPairs + 4; ++i)
    if (std::count(en[i].begin(), en[i].end(), ' ') >= 5) {
      de.push_back(de[i]);
      en.push_back(en[i].substr(0, en[i].find(' ')));
    }
  write_lines(dir.file("c.de"), de);
  write_lines(dir.file("c.en"), en);
  const std::string base = test::torchmt_binary() + " filter --threads 1 -m " + m.deen + " --backward-model " + m.ende +
                           " --src " + dir.file("c.de") + " --tgt " + dir.file("c.en") + " --kept-src " +
                           dir.file("k.de") + " --kept-tgt " + dir.file("k.en");
  const Translator f = load_translator(m.deen, torch::kCPU, torch::kFloat);
  const auto log_ratio = [&f](const std::string& src, const std::string& tgt) {
    return std::log(static_cast<double>(f.tgt_tokenizer().encode(tgt).size() + 1) /
                    static_cast<double>(f.src_tokenizer().encode(src).size() + 1));
  };
  const auto bounds_text = [](double low, double high) {
    std::ostringstream out;
    out << std::exp(low) << "-" << std::exp(high);
    return out.str();
  };
  // Every scored pair within the score (--keep-fraction 1): the length ratio alone drops, here
  // outside the corpus's own (no reference pairs) 0.1 and 0.9 quantiles, recomputed from the pieces.
  std::vector<double> ratio;
  for (size_t i = 0; i < de.size(); ++i) ratio.push_back(log_ratio(de[i], en[i]));
  auto sorted = ratio;
  std::sort(sorted.begin(), sorted.end());
  const double low = sorted[4], high = sorted[39];  // floor(0.1 x 44), floor(0.9 x 44)
  std::vector<std::string> expected;
  for (size_t i = 0; i < de.size(); ++i)
    if (ratio[i] < low || ratio[i] > high) expected.push_back(std::to_string(i + 1));
  for (size_t i = kPairs; i < de.size(); ++i) EXPECT_LT(ratio[i], low) << "cut line " << i + 1;
  auto r = test::run_command(base + " --keep-fraction 1 --length-quantile 0.1 --dropped " + dir.file("d.tsv") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> got;
  for (const auto& row : file_lines(dir.file("d.tsv"))) {
    EXPECT_NE(row.find("\tlength ratio\t"), std::string::npos) << row;
    got.push_back(row.substr(0, row.find('\t')));
  }
  EXPECT_EQ(got, expected);
  EXPECT_NE(r.output.find("filter: --length-quantile 0.1: kept pairs have " + bounds_text(low, high) +
                          " target pieces per source piece, the scored pairs' ratios' 0.1 and 0.9 quantiles"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("kept " + std::to_string(44 - expected.size()) + " of 44 pairs (dropped 0 scoring above "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(", " + std::to_string(expected.size()) + " with target pieces per source piece outside " +
                          bounds_text(low, high) + ", 0 that could not be scored"),
            std::string::npos)
      << r.output;
  r = test::run_command(base + " --keep-fraction 1 --length-quantile 0 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kept 44 of 44 pairs"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--length-quantile"), std::string::npos) << r.output;

  // Re-paired pairs are held to the bounds: with any score accepted, a dropped source is never given
  // a cut target (its own among them).
  r = test::run_command(base + " --max-score 1000 --length-quantile 0.1 --realign --realign-quantile 1 --realigned " +
                        dir.file("r.tsv") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& row : file_lines(dir.file("r.tsv"))) {
    const auto source_line = std::stoul(row), target_line = std::stoul(row.substr(row.find('\t') + 1));
    EXPECT_LE(target_line, kPairs) << row;
    const double re = log_ratio(de[source_line - 1], en[target_line - 1]);
    EXPECT_TRUE(re >= low && re <= high) << row;
  }

  // With reference pairs, their ratios' quantiles: 0.002 of the 40 memorised pairs is their least
  // and greatest.
  std::vector<double> reference;
  for (size_t i = 0; i < kPairs; ++i) reference.push_back(log_ratio(de[i], en[i]));
  r = test::run_command(base + " --reference-src " + m.de + " --reference-tgt " + m.en + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("filter: --length-quantile 0.002: kept pairs have " +
                          bounds_text(*std::min_element(reference.begin(), reference.end()),
                                      *std::max_element(reference.begin(), reference.end())) +
                          " target pieces per source piece, the reference pairs' ratios' 0.002 and 0.998 quantiles"),
            std::string::npos)
      << r.output;
}

TEST(Filter, WrongRolesCountsAndFlagsAreOneLineErrors) {
  const auto& m = memorised();
  test::TempDir dir;
  auto de = file_lines(m.de);
  de.pop_back();
  write_lines(dir.file("short.de"), de);
  const std::string tm = test::torchmt_binary() + " filter -q --threads 1 ";
  const std::string kept = " --kept-src " + dir.file("k.de") + " --kept-tgt " + dir.file("k.en");
  struct Case {
    std::string args, expected;
    int code;
  };
  const std::vector<Case> cases = {
      {"-m " + m.ende + " --backward-model " + m.deen + " --src " + m.de + " --tgt " + m.en + kept + " --max-score 2",
       "-m " + m.ende + " does not translate --src into --tgt", 2},
      {"-m " + m.deen + " --backward-model " + m.deen + " --src " + m.de + " --tgt " + m.en + kept + " --max-score 2",
       "--backward-model " + m.deen + " does not translate --tgt into --src", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + dir.file("short.de") + " --tgt " + m.en + kept +
           " --max-score 2",
       "line counts differ", 1},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept,
       "give one of --max-score S (> 0), --keep-fraction F and --reference-src/--reference-tgt", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept +
           " --reference-src " + m.de,
       "--reference-src and --reference-tgt go together", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept +
           " --reference-src " + m.de + " --reference-tgt " + m.en + " --reference-quantile 1.5",
       "--reference-quantile must be in (0, 1]", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept +
           " --reference-src " + m.de + " --reference-tgt " + dir.file("short.de"),
       "line counts differ", 1},
      {"-m " + m.deen + " --src " + m.de + " --tgt " + m.en + kept + " --max-score 2",
       "missing required option --backward-model", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept +
           " --max-score 2 --realigned " + dir.file("r.tsv"),
       "--realigned writes what --realign re-paired: give --realign", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept +
           " --max-score 2 --realign --realign-candidates 0",
       "--realign-candidates must be at least 1", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept +
           " --max-score 2 --realign --realign-quantile 0",
       "--realign-quantile must be in (0, 1]", 2},
      {"-m " + m.deen + " --backward-model " + m.ende + " --src " + m.de + " --tgt " + m.en + kept +
           " --max-score 2 --length-quantile 0.5",
       "--length-quantile must be in [0, 0.5)", 2},
  };
  for (const auto& c : cases) {
    const auto r = test::run_command(tm + c.args + " 2>&1");
    EXPECT_EQ(r.exit_code, c.code) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("k.de"))) << "nothing written on an error";
}

}  // namespace
}  // namespace torchmt
