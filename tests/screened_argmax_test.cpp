// Greedy decoding's screened projection (screened_argmax.h): every row it decides gets the
// token of the full fp32 projection's log-softmax top-1, near-ties go back to the full row,
// a changed weight is screened anew; and a greedy search without scores finds the same tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "torchmt/decoding/row_top_k.h"
#include "torchmt/decoding/search.h"
#include "torchmt/decoding/transformer_decoder.h"
#include "torchmt/model/fused_inference_ops.h"
#include "torchmt/model/int8_linear.h"
#include "torchmt/model/screened_argmax.h"
#include "torchmt/model/small_batch_linear.h"

namespace torchmt {
namespace {

// What greedy search takes without the screen: the top-1 of the log-softmax of the kernel's logits.
std::vector<int64_t> full_top1(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  auto logits = try_small_batch_linear_cpu(x, w, b);
  EXPECT_TRUE(logits.defined());
  EXPECT_TRUE(try_log_softmax_in_place_cpu(logits));
  auto top = row_top_k(logits, 1).second.contiguous();
  return std::vector<int64_t>(top.data_ptr<int64_t>(), top.data_ptr<int64_t>() + top.numel());
}

bool int8_screen_runs() { return int8_active_kernel() != Int8Kernel::portable; }

TEST(ScreenedArgmax, DecidedRowsGetTheFullProjectionsTokenFromFewFp32Logits) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  // Widths off the kernels' vector and block sizes; logits spread like a trained projection's.
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{256, 3000}, {200, 1001}, {37, 500}}) {
    auto w = torch::randn({out, in}) * 0.05;
    for (bool with_bias : {true, false}) {
      auto b = with_bias ? torch::randn({out}) * 0.1 : torch::Tensor();
      ScreenedArgmaxCache cache;
      int64_t decided = 0, total = 0;
      for (int64_t rows = 1; rows <= kSmallBatchLinearMaxRows; ++rows) {
        auto x = torch::randn({rows, in}) * 2.0;
        const auto before = ScreenedArgmaxCache::stats();
        const auto tokens = cache.try_argmax(x, w, b);
        const auto after = ScreenedArgmaxCache::stats();
        EXPECT_EQ(after.rows - before.rows, rows);
        EXPECT_EQ(after.open_rows - before.open_rows, std::count(tokens.begin(), tokens.end(), -1));
        ASSERT_EQ(static_cast<int64_t>(tokens.size()), rows);
        const auto expected = full_top1(x, w, b);
        for (int64_t m = 0; m < rows; ++m) {
          ++total;
          if (tokens[m] < 0) continue;
          ++decided;
          EXPECT_EQ(tokens[m], expected[m]) << in << "x" << out << " row " << m << " of " << rows;
        }
        if (rows == 1 && tokens[0] >= 0) {
          EXPECT_LT(after.fp32_logits - before.fp32_logits, out / 4) << "the screen ruled out too few rows";
        }
      }
      EXPECT_GT(decided, total / 2) << in << "x" << out << ": the screen decided " << decided << " of " << total;
    }
  }
}

TEST(ScreenedArgmax, ATieOrNearTieIsLeftToTheFullRow) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const int64_t in = 64, out = 300;
  auto w = torch::randn({out, in}) * 0.05;
  auto x = torch::randn({1, in});
  // Rows 7 and 123 point along x: far above the others, and equal (a tie) or 1e-6 apart.
  w[7] = x[0] / x.norm() * 3.0;
  w[123] = w[7].clone();
  ScreenedArgmaxCache cache;
  EXPECT_EQ(cache.try_argmax(x, w, torch::Tensor()), std::vector<int64_t>{-1});
  w[123] *= 1.0 + 1e-6;
  EXPECT_EQ(cache.try_argmax(x, w, torch::Tensor()), std::vector<int64_t>{-1});
  // Apart by more than the margin, the screen decides, as the full row does.
  w[123] *= 1.01;
  EXPECT_EQ(cache.try_argmax(x, w, torch::Tensor()), std::vector<int64_t>{123});
  EXPECT_EQ(full_top1(x, w, torch::Tensor()), std::vector<int64_t>{123});
}

TEST(ScreenedArgmax, AWeightChangedInPlaceIsScreenedAnew) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  auto w = torch::randn({400, 48}) * 0.05, b = torch::zeros({400});
  auto x = torch::randn({1, 48});
  ScreenedArgmaxCache cache;
  w[17] = x[0] / x.norm();
  EXPECT_EQ(cache.try_argmax(x, w, b), std::vector<int64_t>{17});
  w[250] = x[0] / x.norm() * 2.0;  // an optimizer step: the same storage, a new version
  EXPECT_EQ(cache.try_argmax(x, w, b), std::vector<int64_t>{250});
  b[3] = 1000.0f;  // the bias too
  EXPECT_EQ(cache.try_argmax(x, w, b), std::vector<int64_t>{3});
}

TEST(ScreenedArgmax, StepsAsideWhereTheFullPathIsAnotherKernel) {
  torch::manual_seed(7);
  auto w = torch::randn({100, 32}), x = torch::randn({9, 32});
  ScreenedArgmaxCache cache;
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(cache.try_argmax(x, w, torch::Tensor()).empty()) << "more rows than the few-row kernel takes";
    EXPECT_TRUE(cache.try_argmax(x.slice(0, 0, 2).to(torch::kBFloat16), w, torch::Tensor()).empty());
    auto nan_row = x.slice(0, 0, 1).clone();
    nan_row[0][3] = std::nan("");
    if (int8_screen_runs()) {
      EXPECT_EQ(cache.try_argmax(nan_row, w, torch::Tensor()), std::vector<int64_t>{-1});
    }
  }
  EXPECT_TRUE(cache.try_argmax(x.slice(0, 0, 2), w, torch::Tensor()).empty()) << "gradients on";
}

// A real (random, tiny) model: greedy search without scores finds the tokens it finds with
// them, and its scores are NaN, not a number that looks right.
TEST(ScreenedArgmax, GreedySearchWithoutScoresFindsTheSameTokens) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 300;
  torch::manual_seed(8);
  Transformer model(c);
  model->eval();
  auto src = torch::randint(4, 300, {6, 9}, torch::kLong);
  src.index_put_({2, torch::indexing::Slice(5)}, 0);
  SearchOptions with;
  with.beam_size = 1;
  with.max_len_a = 0;
  with.max_len_b = 12;
  SearchOptions without = with;
  without.scores = false;
  torch::NoGradGuard no_grad;
  for (int64_t batch : {1, 3, 6}) {
    for (int64_t start = 0; start + batch <= src.size(0); start += batch) {
      auto part = src.slice(0, start, start + batch);
      TransformerDecoder a(model, true), b(model, true);
      auto scored = search(a, part, with);
      auto unscored = search(b, part, without);
      for (int64_t i = 0; i < batch; ++i) {
        EXPECT_EQ(unscored[i][0].tokens, scored[i][0].tokens) << "batch " << batch << " sentence " << start + i;
        EXPECT_TRUE(std::isnan(unscored[i][0].score));
        EXPECT_FALSE(std::isnan(scored[i][0].score));
      }
    }
  }
}

}  // namespace
}  // namespace torchmt
