// Configuration files through yaml-cpp / nlohmann-json: the cases the hand-written parser got
// wrong round-trip (\uXXXX escapes, '#' inside a value, apostrophes, quoted values written by
// to_yaml and read back on --resume), and malformed input is one clear error.
#include <gtest/gtest.h>

#include <stdexcept>

#include "test_support.h"
#include "torchmt/model/model_config.h"
#include "torchmt/training/train_options.h"
#include "torchmt/util/flat_config.h"
#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

TEST(FlatConfig, JsonUnicodeEscapesAsPythonWritesThem) {
  // json.dump({"out": "runs/müde", "note": "a\"b"}) with its default ensure_ascii=True.
  auto c = FlatConfig::parse(R"({"out": "runs/m\u00fcde", "note": "a\"b", "steps": 12, "ok": true})");
  EXPECT_EQ(c.get("out"), "runs/müde");
  EXPECT_EQ(c.get("note"), "a\"b");
  EXPECT_EQ(c.get_int("steps"), 12);
  EXPECT_TRUE(c.get_bool("ok"));
  // Surrogate pairs too.
  EXPECT_EQ(FlatConfig::parse(R"({"e": "\ud83d\ude00"})").get("e"), "😀");
}

TEST(FlatConfig, HashInsideAValueIsNotAComment) {
  auto c = FlatConfig::parse("out: runs/#3   # the third run\nname: a#b\n");
  EXPECT_EQ(c.get("out"), "runs/#3");
  EXPECT_EQ(c.get("name"), "a#b");
}

TEST(FlatConfig, ApostrophesDoNotToggleQuoting) {
  auto c = FlatConfig::parse("title: it's Bob's run\nnext: plain\n");
  EXPECT_EQ(c.get("title"), "it's Bob's run");
  EXPECT_EQ(c.get("next"), "plain");
}

TEST(FlatConfig, EveryValueRoundTripsThroughYamlAndJson) {
  FlatConfig c;
  const std::vector<std::pair<std::string, std::string>> values = {
      {"hash", "runs/#3"},        {"quote", "say \"hi\""},  {"apostrophe", "it's"},
      {"backslash", "C:\\tmp\\x"}, {"unicode", "Straße 😀"}, {"colon", "a: b"},
      {"leading_space", "  x"},   {"empty", ""},             {"number_text", "007"},
      {"int", "42"},              {"float", "0.1"},          {"bool", "true"},
      {"newline", "a\nb"},        {"tab", "a\tb"},           {"dash", "- item"},
      {"braces", "{x}"},          {"null_word", "null"},     {"tilde", "~"},
  };
  for (const auto& [k, v] : values) c.set(k, v);
  const auto yaml = c.to_yaml();
  const auto json = c.to_json();
  auto from_yaml = FlatConfig::parse(yaml);
  auto from_json = FlatConfig::parse(json);
  for (const auto& [k, v] : values) {
    EXPECT_EQ(from_yaml.get(k), v) << k << " in\n" << yaml;
    EXPECT_EQ(from_json.get(k), v) << k << " in\n" << json;
  }
}

TEST(FlatConfig, TrainOptionsSurviveTheRunsOwnConfigYaml) {
  TrainOptions o;
  o.train_src = "data/tr #1/train.de";
  o.train_tgt = "data/it's/train.en";
  o.out = "runs/#3 \"quoted\"";
  o.dropout = 0.2;
  auto back = TrainOptions::from_config(FlatConfig::parse(o.to_config().to_yaml()));
  EXPECT_EQ(back.train_src, o.train_src);
  EXPECT_EQ(back.train_tgt, o.train_tgt);
  EXPECT_EQ(back.out, o.out);
  EXPECT_DOUBLE_EQ(back.dropout, 0.2);
  EXPECT_EQ(back.to_config().to_yaml(), o.to_config().to_yaml());
}

TEST(FlatConfig, ModelConfigJsonRoundTrips) {
  auto c = ModelConfig::preset("small");
  c.dropout = 0.15;
  EXPECT_EQ(ModelConfig::from_json(c.to_json()).to_json(), c.to_json());
}

// What FlatConfig::parse says of `text`, or "no error".
std::string message(const std::string& text) {
  try {
    FlatConfig::parse(text);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(FlatConfig, MalformedAndNestedInputAreClearErrors) {
  EXPECT_NE(message("{\"a\": 1,").find("malformed JSON"), std::string::npos);
  EXPECT_NE(message("a: [1, 2\n").find("malformed YAML at line"), std::string::npos);
  EXPECT_NE(message("a:\n  b: 1\n").find("nested"), std::string::npos);
  EXPECT_NE(message("{\"a\": {\"b\": 1}}").find("nested"), std::string::npos);
  EXPECT_NE(message("- a\n- b\n").find("mapping"), std::string::npos);
  EXPECT_NE(message("a: 1\na: 2\n").find("a"), std::string::npos);
  EXPECT_TRUE(FlatConfig::parse("# only a comment\n").values().empty());
  test::TempDir dir;
  EXPECT_THROW(FlatConfig::load(dir.file("missing.yaml")), std::runtime_error);
}

// What the config fuzzer (tests/fuzz/config.cpp) found: each was accepted and then read back
// as something else, or refused with a message spanning lines.
TEST(FlatConfig, FuzzerFindingsStayFixed) {
  EXPECT_EQ(message("a: x\xfe\n"), "not valid UTF-8 (byte 4)");
  EXPECT_EQ(message(std::string("a: x\0y\n", 7)), "character U+0000 (not printable) at byte 4");
  EXPECT_EQ(message("a: \xc2\x86\n"), "character U+0086 (not printable) at byte 3");
  EXPECT_EQ(message("a: \"\\uFFFF\"\n"), "character U+FFFF (not printable) in the value of 'a'");
  EXPECT_EQ(message("{\"a\\u0000b\": 1}"), "character U+0000 (not printable) in a key");
  EXPECT_EQ(message("\n:\n"), "line 2: a key must be a name");
  EXPECT_EQ(message("a: \"\\\n\"\n").find('\n'), std::string::npos);  // yaml-cpp quotes the escape
  // Written and read back unchanged: trailing CRs, a 900-byte key of quotes (over YAML's 1024
  // once escaped), a number out of double's range (JSON would write null).
  FlatConfig c;
  c.set("cr", "x\r\r");
  c.set(std::string(900, '"'), "v");
  c.set("big", "1e999");
  c.set_list("list", {"a\tb", ""});
  for (const FlatConfig& back : {FlatConfig::parse(c.to_yaml()), FlatConfig::parse(c.to_json())}) {
    EXPECT_EQ(back.values(), c.values());
    EXPECT_EQ(back.get_list("list"), c.get_list("list"));
  }
  EXPECT_EQ(escape_control("a\nb\x01\x7f"), "a\\nb\\x01\\x7f");
}

}  // namespace
}  // namespace torchmt
