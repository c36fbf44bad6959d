// Dynamic int8 linear layers: the kernel against the quantization formula computed in double,
// the VNNI and AVX2 kernels against the portable loop, the model with and without int8.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "data_test_support.h"
#include "torchmt/model/int8_linear.h"
#include "torchmt/model/linear.h"
#include "torchmt/model/masks.h"
#include "torchmt/model/transformer.h"

namespace torchmt {
namespace {

// The documented formula, in double: per-row symmetric int8 for weights and inputs.
at::Tensor reference_int8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  auto quantize = [](const at::Tensor& t) {  // [R, K] -> (q, scale [R, 1])
    auto amax = t.abs().amax(1, true);
    auto scale = torch::where(amax > 0, amax / 127.0, torch::ones_like(amax));
    return std::make_pair(torch::round(t / scale), scale);
  };
  auto xd = x.to(torch::kDouble).reshape({-1, x.size(-1)}), wd = w.to(torch::kDouble);
  auto [xq, xs] = quantize(xd);
  auto [wq, ws] = quantize(wd);
  ws = torch::where(wd.abs().amax(1, true) > 0, ws, torch::zeros_like(ws));
  auto y = xq.matmul(wq.t()) * xs * ws.t() + b.to(torch::kDouble);  // [R, N]
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  return y.reshape(shape);
}

TEST(Int8Linear, MatchesTheQuantizationFormulaForEveryShape) {
  torch::manual_seed(3);
  for (int64_t in : {256, 30}) {
    for (int64_t out : {16, 40, 1000}) {
      auto w = torch::randn({out, in}) * 0.1;
      w[1].zero_();  // an all-zero row
      auto b = torch::randn({out});
      for (int64_t rows : {1, 3, 8, 9, 70}) {
        auto x = torch::randn({rows, in});
        x[0].zero_();
        auto q = quantize_linear_int8(w, b);
        auto y = int8_linear(x, *q);
        auto expected = reference_int8(x, w, b).to(torch::kFloat);
        ASSERT_EQ(y.sizes(), expected.sizes());
        EXPECT_TRUE(torch::allclose(y, expected, 1e-4, 1e-4))
            << in << "x" << out << ", " << rows << " rows: " << (y - expected).abs().max().item<float>();
        // The float layer, for scale: int8 stays within a few percent of it.
        auto exact = torch::linear(x, w, b);
        EXPECT_LT((y - exact).norm().item<double>(), 0.03 * exact.norm().item<double>() + 1e-3);
        // Rows are independent: a row alone gives what it gives in the batch.
        EXPECT_TRUE(torch::equal(int8_linear(x.narrow(0, rows - 1, 1), *q), y.narrow(0, rows - 1, 1)));
      }
    }
  }
}

TEST(Int8Linear, EveryKernelThisCpuRunsEqualsThePortableLoop) {
  if (int8_cpu_kernel() == Int8Kernel::portable) GTEST_SKIP() << "this CPU runs only the portable loop";
  torch::manual_seed(4);
  std::vector<Int8Kernel> kernels = {Int8Kernel::avx2};
  if (int8_cpu_kernel() == Int8Kernel::vnni) kernels.push_back(Int8Kernel::vnni);
  for (Int8Kernel kernel : kernels) {
    SCOPED_TRACE(int8_kernel_name(kernel));
    // Output counts that end on a whole 4-block panel and on 1, 2 and 3 blocks (1,000 = 15 panels
    // + 3 blocks, the last one partly padding); row counts that end on every row-tile remainder;
    // inputs that are and are not a multiple of AVX2's 32-input quantization step.
    for (int64_t out : {1000, 16, 40, 80, 96, 128}) {
      for (int64_t in : {256, 30, 70}) {
        auto w = torch::randn({out, in}) * 0.05, b = torch::randn({out});
        w[0].fill_(0.05);  // a row of largest weights: every product at its extreme
        auto q = quantize_linear_int8(w, b);
        for (int64_t rows : {1, 2, 3, 4, 5, 7, 13, 64}) {
          auto x = torch::randn({1, rows, in});  // [B, T, D]: leading dimensions are kept
          x[0][0].fill_(-1.f);                    // inputs at -127 against weights at 127
          set_int8_kernel_limit(kernel);
          auto fast = int8_linear(x, *q);
          auto alone = int8_linear(x[0][rows - 1], *q);
          set_int8_kernel_limit(Int8Kernel::portable);
          auto portable = int8_linear(x, *q);
          set_int8_kernel_limit(Int8Kernel::vnni);
          EXPECT_EQ(fast.sizes(), torch::IntArrayRef({1, rows, out}));
          // The same integer sums and one rounding of the same product: equal, not only close.
          EXPECT_TRUE(torch::equal(fast, portable)) << out << "x" << in << ", " << rows << " rows";
          // Any row alone gives what it gives in the batch.
          EXPECT_TRUE(torch::equal(alone, fast[0][rows - 1]));
        }
      }
    }
  }
}

TEST(Int8Linear, TheModelUsesItWithoutGradientsOnly) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 50;
  torch::manual_seed(5);
  Transformer model(c);
  model->eval();
  auto src = torch::randint(4, 50, {3, 7}), tgt = torch::randint(4, 50, {3, 5});
  auto float_logits = model->forward(src, tgt).detach();
  const int64_t linears = 4 * (c.num_encoder_layers + 2 * c.num_decoder_layers) + 2 * (c.num_encoder_layers + c.num_decoder_layers) + 1;
  EXPECT_EQ(quantize_linears_int8(*model), linears);  // every Linear: attention, FFN, output projection
  // Training (grad mode on) never sees the int8 copies.
  EXPECT_TRUE(torch::equal(model->forward(src, tgt).detach(), float_logits));
  torch::NoGradGuard no_grad;
  auto int8_logits = model->forward(src, tgt);
  quantize_linears_int8(*model, /*enable=*/false);
  auto float_inference = model->forward(src, tgt);  // fused inference passes, float linears
  EXPECT_TRUE(torch::allclose(float_inference, float_logits, 1e-5, 1e-5));
  quantize_linears_int8(*model);
  EXPECT_FALSE(torch::equal(int8_logits, float_logits));
  EXPECT_LT((int8_logits - float_logits).norm().item<double>(), 0.05 * float_logits.norm().item<double>());
  quantize_linears_int8(*model, /*enable=*/false);
  EXPECT_TRUE(torch::equal(model->forward(src, tgt), float_inference));
}

}  // namespace
}  // namespace torchmt
