// The option table: one row per option gives reading, writing, defaults and renames.
#include <gtest/gtest.h>

#include "torchmt/decoding/translation_options.h"
#include "torchmt/model/model_config.h"
#include "torchmt/training/train_options.h"
#include "torchmt/util/option_table.h"

namespace torchmt {
namespace {

struct Inner {
  int64_t count = 3;
};
struct Sample {
  std::string name = "x";
  double rate = 0.1;
  bool on = false;
  uint32_t seed = 7;
  std::vector<std::string> files;
  Inner inner;
};

OptionTable<Sample> sample_table() {
  OptionTable<Inner> inner("inner");
  inner.add("count", &Inner::count, "a count", {"", "", {"old_count"}});
  OptionTable<Sample> t("sample");
  t.add("name", &Sample::name, "a name", {"n", "group", {}});
  t.add("rate", &Sample::rate, "a rate");
  t.add("on", &Sample::on, "a switch");
  t.add("seed", &Sample::seed, "a seed");
  t.add("files", &Sample::files, "some files");
  t.include(inner, &Sample::inner);
  return t;
}

TEST(OptionTable, DefaultsComeFromTheStructAndRowsKnowTheirKind) {
  auto t = sample_table();
  auto rows = t.rows();
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].default_text, "x");
  EXPECT_EQ(rows[0].short_flag, "n");
  EXPECT_EQ(rows[1].default_text, "0.1");  // shortest text, not 0.100000
  EXPECT_EQ(rows[1].kind, OptionKind::kReal);
  EXPECT_EQ(rows[2].kind, OptionKind::kBool);
  EXPECT_EQ(rows[3].kind, OptionKind::kInteger);
  EXPECT_EQ(rows[4].kind, OptionKind::kList);
  EXPECT_EQ(rows[5].key, "count");
  EXPECT_EQ(rows[5].default_text, "3");
  OptionRow row;
  row.key = "max_len_a";
  EXPECT_EQ(row.flag(), "max-len-a");
}

TEST(OptionTable, ReadsWritesAndRoundTripsThroughYamlAndJson) {
  auto t = sample_table();
  FlatConfig c = FlatConfig::parse("name: \"runs/#3 ü\"\nrate: 2.5\non: true\nfiles: [a.pt, b.pt]\ncount: 9\n");
  Sample s = t.read(c);
  EXPECT_EQ(s.name, "runs/#3 ü");
  EXPECT_EQ(s.rate, 2.5);
  EXPECT_TRUE(s.on);
  EXPECT_EQ(s.seed, 7u);  // not named: the default stays
  EXPECT_EQ(s.files, (std::vector<std::string>{"a.pt", "b.pt"}));
  EXPECT_EQ(s.inner.count, 9);
  for (const std::string& text : {t.write(s).to_yaml(), t.write(s).to_json()}) {
    Sample back = t.read(FlatConfig::parse(text));
    EXPECT_EQ(back.name, s.name) << text;
    EXPECT_EQ(back.rate, s.rate) << text;
    EXPECT_EQ(back.on, s.on) << text;
    EXPECT_EQ(back.files, s.files) << text;
    EXPECT_EQ(back.inner.count, s.inner.count) << text;
  }
}

TEST(OptionTable, UnknownKeysAndBadValuesNameTheKey) {
  auto t = sample_table();
  try {
    t.read(FlatConfig::parse("nmae: y\n"));
    FAIL() << "unknown key accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown sample option 'nmae'"), std::string::npos) << e.what();
  }
  try {
    t.read(FlatConfig::parse("rate: fast\n"));
    FAIL() << "bad number accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rate"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.read(FlatConfig::parse("on: maybe\n")), std::invalid_argument);
  // A narrower field does not wrap round: 2^32 + 7 is no 7, -1 no 4294967295.
  for (const char* seed : {"4294967303", "-1"}) {
    try {
      t.read(FlatConfig::parse(std::string("seed: ") + seed + "\n"));
      FAIL() << "seed " << seed << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("config key seed is out of range: " + std::string(seed) + " (from 0 to 4294967295)"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(t.read(FlatConfig::parse("seed: 4294967295\n")).seed, 4294967295u);
  EXPECT_THROW(t.read(FlatConfig::parse("name: [a, b]\n")), std::invalid_argument);
}

TEST(OptionTable, EarlierNamesAreStillRead) {
  auto t = sample_table();
  EXPECT_EQ(t.read(FlatConfig::parse("old_count: 5\n"), Sample{}, false).inner.count, 5);
  ASSERT_NE(t.row("old_count"), nullptr);
  EXPECT_EQ(t.row("old_count")->key, "count");
  // A run directory written before the renames resumes: max_len/max_tokens read as the new names.
  TrainOptions o = train_option_table().read(FlatConfig::parse("max_len: 100\nmax_tokens: 1234\n"), {}, false);
  EXPECT_EQ(o.max_sentence_tokens, 100);
  EXPECT_EQ(o.batch_tokens, 1234);
  TranslatorConfig tc = translator_option_table().read(FlatConfig::parse("max_tokens: 77\n"), {}, false);
  EXPECT_EQ(tc.translation.batch_source_tokens, 77);
}

TEST(OptionTable, TrainOptionsRoundTripEveryField) {
  TrainOptions o;
  o.train_src = "a b/#1.de";
  o.train_tgt = "it's.en";
  o.max_minutes = 12.5;
  o.seed = 42;
  o.resume = true;
  o.batch_tokens = 999;
  const FlatConfig written = o.to_config();
  EXPECT_EQ(written.keys().size(), train_option_table().rows().size());
  TrainOptions back = TrainOptions::from_config(FlatConfig::parse(written.to_yaml()));
  EXPECT_EQ(back.to_config().to_yaml(), written.to_yaml());
  EXPECT_EQ(back.train_tgt, "it's.en");
  EXPECT_EQ(back.max_minutes, 12.5);
}

TEST(OptionTable, ModelConfigJsonRoundTripsAndReadsTheOldPositionKey) {
  ModelConfig c = ModelConfig::preset("small");
  c.dropout = 0.15;
  c.activation = Activation::kGELU;
  ModelConfig back = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.dropout, 0.15);
  EXPECT_EQ(back.activation, Activation::kGELU);
  // A checkpoint written before the rename calls the positional table max_len.
  std::string old = c.to_json();
  old.replace(old.find("max_positions"), std::string("max_positions").size(), "max_len");
  EXPECT_EQ(ModelConfig::from_json(old).max_positions, c.max_positions);
  // Every field must be there: a truncated configuration is refused, naming the field.
  std::string partial = "{\"d_model\": 64}";
  try {
    ModelConfig::from_json(partial);
    FAIL() << "partial config accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lacks"), std::string::npos) << e.what();
  }
}

TEST(OptionTable, TranslatorConfigValidationNamesTheFlag) {
  TranslatorConfig c;
  try {
    c.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--model"), std::string::npos);
  }
  c.models = {"m.pt"};
  c.translation.search.beam_size = 2;
  c.translation.search.nbest = 3;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.translation.search.nbest = 2;
  EXPECT_NO_THROW(c.validate());
  c.greedy = true;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(OptionTable, RealsAreWrittenAsTheShortestTextThatReadsBack) {
  // Whole numbers stay whole ("--dist-timeout (default: 600)", not "6e+02").
  EXPECT_EQ(real_text(60), "60");
  EXPECT_EQ(real_text(600), "600");
  EXPECT_EQ(real_text(0), "0");
  EXPECT_EQ(real_text(-3), "-3");
  EXPECT_EQ(real_text(0.1), "0.1");
  EXPECT_EQ(real_text(0.999), "0.999");
  EXPECT_EQ(real_text(1e-9), "1e-09");
  EXPECT_EQ(real_text(2.5e20), "2.5e+20");
  const double third = 1.0 / 3.0;
  EXPECT_EQ(std::strtod(real_text(third).c_str(), nullptr), third);
  Sample s;
  s.rate = 60;
  EXPECT_EQ(sample_table().write(s).get("rate"), "60");
  EXPECT_NE(sample_table().write(s).to_yaml().find("rate: 60\n"), std::string::npos);
}

}  // namespace
}  // namespace torchmt
