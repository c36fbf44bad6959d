// Translator: raw text in, raw text out, in input order, whatever the batching.
#include <gtest/gtest.h>

#include "data_test_support.h"
#include "torchmt/data/text_file.h"
#include "torchmt/decoding/translator.h"

namespace torchmt {
namespace {

Translator random_translator() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = test::sample_tokenizer().vocab_size();
  c.max_positions = 64;
  torch::manual_seed(9);
  return Translator(Transformer(c), test::sample_tokenizer(), test::sample_tokenizer(), torch::kCPU, torch::kFloat);
}

std::vector<std::string> sample_lines(size_t n) {
  auto lines = read_lines(test::sample_de());
  lines.resize(n);
  return lines;
}

TEST(Translator, BatchedEqualsOneByOneAndKeepsInputOrder) {
  auto translator = random_translator();
  auto lines = sample_lines(12);
  for (int64_t beam : {1, 4}) {
    TranslationOptions batched;
    batched.search.beam_size = beam;
    batched.batch_size = 5;
    auto together = translator.translate_text(lines, batched);
    ASSERT_EQ(together.size(), lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      TranslationOptions single = batched;
      single.batch_size = 1;
      EXPECT_EQ(translator.translate_text({lines[i]}, single)[0], together[i]) << "line " << i << " beam " << beam;
    }
    TranslationOptions by_tokens = batched;
    by_tokens.batch_source_tokens = 40;
    EXPECT_EQ(translator.translate_text(lines, by_tokens), together);
  }
}

TEST(Translator, EmptyLinesStayEmptyAndLongLinesAreCut) {
  auto translator = random_translator();
  std::string long_line;
  for (int i = 0; i < 200; ++i) long_line += "Guten Morgen ";
  std::vector<std::string> lines = {"", "Guten Morgen.", "   ", long_line};
  TranslationOptions o;
  o.search.beam_size = 3;
  auto out = translator.translate(lines, o);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].texts[0], "");
  EXPECT_EQ(out[2].texts[0], "");
  EXPECT_FALSE(out[1].truncated);
  EXPECT_TRUE(out[3].truncated);
  EXPECT_LE(static_cast<int64_t>(out[3].hypotheses[0].tokens.size()), 63);
}

TEST(Translator, CrossAttentionHasTargetBySourceShape) {
  auto translator = random_translator();
  auto w = translator.cross_attention("Guten Morgen.", {10, 11, 12}, -1, -1);
  const auto src_len = static_cast<int64_t>(translator.encode_source("Guten Morgen.").size());
  EXPECT_EQ(w.sizes(), torch::IntArrayRef({4, src_len}));  // bos + 3 targets, pieces + eos
  EXPECT_TRUE(torch::allclose(w.sum(-1), torch::ones({4}), 1e-5, 1e-5));
  EXPECT_THROW(translator.cross_attention("x", {5}, 7, -1), std::invalid_argument);
}

}  // namespace
}  // namespace torchmt
