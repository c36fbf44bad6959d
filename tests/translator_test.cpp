// Translator: raw text in, raw text out, in input order, whatever the batching.
#include <gtest/gtest.h>

#include "data_test_support.h"
#include "data/text_file.h"
#include "torchmt/decoding/translator.h"

namespace torchmt {
namespace {

using test::random_translator;
using test::sample_lines;


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

TEST(Translator, WorkersGiveTheSameTranslationsInInputOrder) {
  auto translator = random_translator();
  auto lines = sample_lines(12);
  lines[5] = "";  // an empty line among them stays in its place
  for (int64_t beam : {1, 3}) {
    TranslationOptions one;
    one.search.beam_size = beam;
    one.batch_size = 2;  // 6 batches for the workers to share
    one.workers = 1;
    one.threads_per_worker = 1;
    const auto expected = translator.translate_text(lines, one);
    for (int64_t workers : {2, 3, 8}) {
      TranslationOptions many = one;
      many.workers = workers;
      EXPECT_EQ(translator.translate_text(lines, many), expected) << workers << " workers, beam " << beam;
    }
  }
}

TEST(Translator, WorkerPlanFollowsTheOptionsAndTheJob) {
  auto translator = random_translator();
  TranslationOptions o;
  o.workers = 3;
  o.threads_per_worker = 2;
  auto plan = translator.plan_workers(o, 10);
  EXPECT_EQ(plan.workers, 3);
  EXPECT_EQ(plan.threads_per_worker, 2);
  o.workers = o.threads_per_worker = 0;  // auto: never more workers than batches or CPU threads
  plan = translator.plan_workers(o, 1);
  EXPECT_EQ(plan.workers, 1);
  EXPECT_EQ(plan.threads_per_worker, std::max(1, at::get_num_threads()));
  plan = translator.plan_workers(o, 1000);
  EXPECT_EQ(plan.workers, at::get_num_threads());
  EXPECT_EQ(plan.threads_per_worker, 1);
  // A runtime's thread plan caps the workers (inter_threads) and sets their threads (intra_threads).
  Runtime rt;
  rt.inter_threads = 2;
  rt.intra_threads = 3;
  translator.set_runtime(rt);
  plan = translator.plan_workers(o, 1000);
  EXPECT_EQ(plan.workers, 2);
  EXPECT_EQ(plan.threads_per_worker, 3);
  plan = translator.plan_workers(o, 1);
  EXPECT_EQ(plan.workers, 1);
}

// A decoder that fails on a batch of a given size: the error of one worker reaches the caller.
class FailingDecoder : public IncrementalDecoder {
 public:
  void start(const at::Tensor& src) override {
    if (src.size(0) == 1) throw std::runtime_error("decoder failed on purpose");
    rows_ = src.size(0);
  }
  at::Tensor step(const at::Tensor& last) override {
    auto logp = torch::full({last.size(0), 8}, -10.0);  // [N, V]: eos (3) wins at once
    logp.select(1, 3).fill_(0.0);
    return logp;
  }
  void select(const at::Tensor&) override {}
  at::Device device() const override { return torch::kCPU; }

 private:
  int64_t rows_ = 0;
};

TEST(Translator, AnErrorInOneWorkerReachesTheCaller) {
  ModelConfig c = ModelConfig::preset("tiny");
  Translator translator([](bool) { return std::make_unique<FailingDecoder>(); }, c, test::sample_tokenizer(),
                        test::sample_tokenizer(), torch::kCPU, torch::kFloat);
  TranslationOptions o;
  o.batch_size = 2;
  o.workers = 2;
  auto lines = sample_lines(7);  // 4 batches, the last of one line
  try {
    translator.translate_text(lines, o);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "decoder failed on purpose");
  }
  lines.resize(6);  // batches of two only: translates (to empty lines)
  EXPECT_EQ(translator.translate_text(lines, o), std::vector<std::string>(6, ""));
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
