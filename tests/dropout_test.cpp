// torchmt::Dropout: the hashed CPU mask (rate, scaling, determinism, gradient) and its
// contract with the rest of the model (identity in eval mode).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "torchmt/model/dropout.h"
#include "model/masks.h"

#include "kernel_isa_support.h"
#include "kernels/primitives.h"

namespace torchmt {
namespace {

// The CPU kernels on every instruction set this machine runs.
class DropoutKernel : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(DropoutKernel);

TEST(Dropout, IsTheIdentityInEvalModeAndForZeroRate) {
  Dropout dropout(0.3);
  dropout->eval();
  auto x = torch::randn({4, 5});
  EXPECT_TRUE(torch::equal(dropout(x), x));
  Dropout none(0.0);
  none->train();
  EXPECT_TRUE(torch::equal(none(x), x));
}

TEST(Dropout, DropsAboutPAndScalesTheRestByOneOverOneMinusP) {
  const double p = 0.1;
  auto x = torch::rand({1000, 1000}) + 1.0f;  // no zeros of its own
  auto y = hashed_dropout(x, p, 12345);
  const double dropped = y.eq(0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, p, 0.002);  // 1e6 draws: sd 3e-4
  auto kept = y.ne(0);
  EXPECT_TRUE(torch::allclose(y.masked_select(kept), x.masked_select(kept) / (1.0 - p), 1e-6, 0));
  // Each row and each column sees about the same rate: no pattern tied to the index.
  auto per_row = y.eq(0).to(torch::kDouble).mean(1);
  EXPECT_LT((per_row - p).abs().max().item<double>(), 0.05);
}

TEST_P(DropoutKernel, SameSeedSameMaskAnyThreadCountDifferentSeedDifferentMask) {
  auto x = torch::randn({300, 257});  // not a multiple of the vector width
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  auto one_thread = hashed_dropout(x, 0.25, 7);
  torch::set_num_threads(2);
  auto two_threads = hashed_dropout(x, 0.25, 7);
  torch::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one_thread, two_threads));
  auto other_seed = hashed_dropout(x, 0.25, 8);
  EXPECT_FALSE(torch::equal(one_thread.eq(0), other_seed.eq(0)));
}

TEST(Dropout, ModuleFollowsTorchManualSeed) {
  Dropout dropout(0.5);
  dropout->train();
  auto x = torch::ones({64, 64});
  torch::manual_seed(3);
  auto a = dropout(x);
  auto b = dropout(x);
  torch::manual_seed(3);
  auto a_again = dropout(x);
  EXPECT_TRUE(torch::equal(a, a_again));
  EXPECT_FALSE(torch::equal(a, b));  // each call draws a fresh seed
}

TEST_P(DropoutKernel, TheVectorMaskIsTheScalarOne) {
  // Elements past the last whole 16-lane block take the scalar rule: a tensor of n elements has
  // positions 16 * (n / 16) .. n - 1 there, so n = 1..48 covers positions 0..47 by the scalar rule,
  // which the long tensor covers by the vector one.
  const auto full = hashed_dropout(torch::ones({1000}), 0.5, 77);
  for (int64_t n = 1; n <= 48; ++n)
    EXPECT_TRUE(torch::equal(hashed_dropout(torch::ones({n}), 0.5, 77), full.slice(0, 0, n))) << n;
}

TEST_P(DropoutKernel, GradientIsTheSameMaskTimesTheScale) {
  auto x = torch::randn({37, 53}, torch::requires_grad());
  auto y = hashed_dropout(x, 0.2, 99);
  auto upstream = torch::randn({37, 53});
  (y * upstream).sum().backward();
  auto expected = upstream * y.detach().ne(0).to(torch::kFloat) / 0.8;
  EXPECT_TRUE(torch::allclose(x.grad(), expected, 1e-6, 1e-6));
}

TEST_P(DropoutKernel, Bf16MatchesFp32RoundedOnce) {
  auto x = torch::randn({129, 65}).to(torch::kBFloat16);
  auto y16 = hashed_dropout(x, 0.1, 5);
  auto y32 = hashed_dropout(x.to(torch::kFloat), 0.1, 5);
  ASSERT_EQ(y16.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y16, y32.to(torch::kBFloat16)));
}

TEST_P(DropoutKernel, FusedBiasReluDropoutIsTheComposedOpsWithDropoutsMask) {
  // 300 x 77: rows not a multiple of the backward's row blocks, a row not a multiple of 16.
  auto h = torch::randn({3, 100, 77});
  auto bias = torch::randn({77}) * 0.5;
  for (double p : {0.0, 0.2}) {
    const auto expected = hashed_dropout(torch::relu(h + bias), p, 41);
    EXPECT_TRUE(torch::equal(kernels::bias_relu_dropout_forward(h, bias, p, 41), expected)) << p;
    // bf16: the same fp32 arithmetic, rounded once.
    const auto h16 = h.to(torch::kBFloat16);
    const auto y16 = kernels::bias_relu_dropout_forward(h16, bias, p, 41);
    ASSERT_EQ(y16.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(y16, hashed_dropout(torch::relu(h16.to(torch::kFloat) + bias), p, 41).to(torch::kBFloat16)));
  }
}

TEST_P(DropoutKernel, FusedBiasReluDropoutGradientsAreTheComposedOps) {
  auto h = torch::randn({300, 77}, torch::requires_grad());
  auto bias = (torch::randn({77}) * 0.5).requires_grad_();
  auto upstream = torch::randn({300, 77});
  torch::manual_seed(5);
  auto y = bias_relu_dropout(h, bias, 0.25);
  (y * upstream).sum().backward();
  // The reference with the seed the fused op drew: the same draw after the same manual_seed.
  auto h2 = h.detach().clone().requires_grad_(), bias2 = bias.detach().clone().requires_grad_();
  torch::manual_seed(5);
  Dropout dropout(0.25);
  dropout->train();
  auto y2 = dropout(torch::relu(h2 + bias2));
  EXPECT_TRUE(torch::equal(y.detach(), y2.detach()));
  (y2 * upstream).sum().backward();
  EXPECT_TRUE(torch::allclose(h.grad(), h2.grad(), 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(bias.grad(), bias2.grad(), 1e-5, 1e-5));
  // The bias gradient is summed in the same order on any number of threads.
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  auto [gh1, gb1] = kernels::bias_relu_dropout_backward(upstream, y.detach(), 0.25);
  torch::set_num_threads(2);
  auto [gh2, gb2] = kernels::bias_relu_dropout_backward(upstream, y.detach(), 0.25);
  torch::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(gh1, gh2));
  EXPECT_TRUE(torch::equal(gb1, gb2));
}

TEST_P(DropoutKernel, ResidualIsTheSumWithDropoutsMaskAndItsGradients) {
  // The residual stream's and the sublayer's dtypes: fp32 training, fp32 + bf16, bf16 autocast.
  const std::vector<std::pair<c10::ScalarType, c10::ScalarType>> kinds = {
      {torch::kFloat, torch::kFloat}, {torch::kFloat, torch::kBFloat16}, {torch::kBFloat16, torch::kBFloat16}};
  for (const auto& [tx, ty] : kinds) {
    auto x = torch::randn({5, 37, 19}).to(tx).requires_grad_();
    auto y = torch::randn({5, 37, 19}).to(ty).requires_grad_();
    auto upstream = torch::randn({5, 37, 19}).to(tx);
    Dropout dropout(0.3);
    dropout->train();
    torch::manual_seed(9);
    auto out = dropout->residual(x, y);
    ASSERT_EQ(out.scalar_type(), tx);
    (out * upstream).sum().backward();
    // The composed ops with the same seed: the same mask, the sum in fp32 rounded once (the
    // vector copies fuse y * scale + x into one FMA: within fp32's last bit, bf16's last bit).
    torch::manual_seed(9);
    auto generator = at::detail::getDefaultCPUGenerator();
    const uint64_t seed = generator.get<at::CPUGeneratorImpl>()->random64();  // the draw residual() made
    const auto keep = hashed_dropout(torch::ones({5, 37, 19}), 0.3, seed).ne(0);
    const double scale = 1.0 / (1.0 - 0.3);
    const auto kept_y = torch::where(keep, y.detach().to(torch::kFloat) * scale, torch::zeros({}));
    const double tolerance = tx == torch::kFloat ? 1e-6 : 1.0 / 128;
    const auto expected = (x.detach().to(torch::kFloat) + kept_y).to(tx).to(torch::kFloat);
    EXPECT_TRUE(torch::allclose(out.detach().to(torch::kFloat), expected, tolerance, 1e-6)) << tx << ty;
    EXPECT_TRUE(torch::equal(x.grad(), upstream));
    ASSERT_EQ(y.grad().scalar_type(), ty);
    EXPECT_TRUE(torch::equal(y.grad(), torch::where(keep, upstream.to(torch::kFloat) * scale, torch::zeros({})).to(ty)))
        << tx << ty;
  }
  // Eval mode: the plain sum.
  Dropout dropout(0.3);
  dropout->eval();
  auto x = torch::randn({4, 3}), y = torch::randn({4, 3});
  EXPECT_TRUE(torch::equal(dropout->residual(x, y), x + y));
}

// Attention's weights in training: the fused pass each way against softmax, the mask's fill and
// dropout composed in double, with the seed the module drew. Keys 7, 16 and 37 (a row shorter
// than, equal to and longer than the 16 lanes); no mask, padding, causal with padding, and a row
// with nothing allowed (every key taken).
TEST_P(DropoutKernel, AttentionWeightsAreTheComposedOpsAndTheirGradients) {
  for (int64_t keys : {7, 16, 37}) {
    const int64_t batch = 3, heads = 2, queries = 5;
    auto padding = torch::ones({batch, 1, 1, keys}, torch::kBool);
    padding.index_put_({1, 0, 0, torch::indexing::Slice(keys - 3, torch::indexing::None)}, false);
    auto causal = torch::ones({queries, keys}, torch::kBool).tril(keys - queries).view({1, 1, queries, keys});
    auto with_empty_row = (causal & padding).clone();  // [B, 1, Tq, Tk]
    with_empty_row.index_put_({2, 0, 3}, false);
    for (const auto& mask : {torch::Tensor(), padding, (causal & padding).contiguous(), with_empty_row}) {
      for (double p : {0.0, 0.2}) {
        for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
          const auto info = "keys " + std::to_string(keys) + " p " + std::to_string(p) +
                            (mask.defined() ? " mask " + std::to_string(mask.dim()) : " no mask") +
                            (dtype == torch::kFloat ? " fp32" : " bf16");
          auto scores = (torch::randn({batch, heads, queries, keys}) * 3).to(dtype).requires_grad_();
          const auto upstream = torch::randn({batch, heads, queries, keys}).to(dtype);
          const double scale = 0.125;
          Dropout dropout(p);
          dropout->train();
          torch::manual_seed(11);
          auto weights = dropout->attention(scores, mask, scale);
          ASSERT_EQ(weights.scalar_type(), dtype) << info;
          (weights * upstream).sum().backward();
          // The reference in double from the same inputs and the seed attention() drew.
          torch::manual_seed(11);
          auto generator = at::detail::getDefaultCPUGenerator();
          const uint64_t seed = generator.get<at::CPUGeneratorImpl>()->random64();
          const auto keep = hashed_dropout(torch::ones({batch, heads, queries, keys}), p, seed).ne(0);
          auto s64 = scores.detach().to(torch::kDouble).requires_grad_();
          auto scaled = s64 * scale;
          if (mask.defined())
            scaled = scaled.masked_fill(without_empty_rows(mask).logical_not(), -std::numeric_limits<double>::infinity());
          const auto expected = torch::where(keep, torch::softmax(scaled, -1) / (1.0 - p), torch::zeros({}, torch::kDouble));
          (expected * upstream.to(torch::kDouble)).sum().backward();
          // fp32: within a few of fp32's last bits; bf16: its last bit.
          const double tolerance = dtype == torch::kFloat ? 1e-5 : 1.0 / 128;
          EXPECT_TRUE(torch::allclose(weights.detach().to(torch::kDouble), expected.detach(), tolerance, 1e-6)) << info;
          EXPECT_TRUE(torch::allclose(scores.grad().to(torch::kDouble), s64.grad(), dtype == torch::kFloat ? 1e-4 : 1.0 / 32,
                                      dtype == torch::kFloat ? 1e-6 : 1e-2))
              << info;
          if (mask.defined()) {  // a key not allowed gets no weight and no gradient (but in an empty row)
            const auto closed = without_empty_rows(mask).logical_not().expand_as(weights);
            EXPECT_EQ(weights.detach().masked_select(closed).abs().sum().item<double>(), 0.0) << info;
            EXPECT_EQ(scores.grad().masked_select(closed).abs().sum().item<double>(), 0.0) << info;
          }
        }
      }
    }
  }
  // A row with an inf or NaN score: NaN where ATen's softmax gives NaN, the other rows untouched.
  {
    auto scores = torch::randn({1, 1, 4, 20});
    scores.index_put_({0, 0, 1, 3}, INFINITY);
    scores.index_put_({0, 0, 2, 17}, NAN);
    auto [y, weights] = kernels::attention_softmax_dropout_forward(scores, {}, 0.5, 0.0, 1);
    const auto expected = torch::softmax(scores * 0.5, -1);
    EXPECT_TRUE(torch::equal(y.isnan(), expected.isnan()));
    EXPECT_TRUE(torch::allclose(y.index({0, 0, 0}), expected.index({0, 0, 0}), 1e-5, 1e-7));
    EXPECT_TRUE(torch::allclose(y.index({0, 0, 3}), expected.index({0, 0, 3}), 1e-5, 1e-7));
  }
  // Rows are independent: the same on 1 and 2 threads.
  auto scores = torch::randn({2, 4, 30, 37}).to(torch::kBFloat16);
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  auto [y1, d1] = kernels::attention_softmax_dropout_forward(scores, {}, 0.125, 0.1, 77);
  auto g1 = kernels::attention_softmax_dropout_backward(d1, y1, 0.125, 0.1, 77);
  torch::set_num_threads(2);
  auto [y2, d2] = kernels::attention_softmax_dropout_forward(scores, {}, 0.125, 0.1, 77);
  auto g2 = kernels::attention_softmax_dropout_backward(d1, y1, 0.125, 0.1, 77);
  torch::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(y1, y2) && torch::equal(d1, d2) && torch::equal(g1, g2));
}

// Outside the kernel's inputs (fp64 scores here) and in eval mode: the composed ops.
TEST(Dropout, AttentionFallsBackToTheComposedOps) {
  auto scores = torch::randn({2, 2, 3, 4}, torch::kDouble);
  auto mask = torch::ones({2, 1, 1, 4}, torch::kBool);
  mask.index_put_({0, 0, 0, 3}, false);
  const auto expected = torch::softmax((scores * 0.5).masked_fill(mask.logical_not(), -INFINITY), -1);
  Dropout dropout(0.0);
  dropout->train();
  EXPECT_TRUE(torch::allclose(dropout->attention(scores, mask, 0.5), expected));
  Dropout eval_dropout(0.3);
  eval_dropout->eval();
  torch::Tensor softmax;
  EXPECT_TRUE(torch::allclose(eval_dropout->attention(scores.to(torch::kFloat), mask, 0.5, false, &softmax),
                              expected.to(torch::kFloat)));
  EXPECT_TRUE(torch::allclose(softmax, expected.to(torch::kFloat)));
}

TEST(Dropout, FusedBiasReluDropoutFallsBackOutsideFp32AndBf16) {
  auto h = torch::randn({8, 5}, torch::kDouble);
  auto bias = torch::randn({5});
  auto y = bias_relu_dropout(h, bias, 0.0);
  EXPECT_EQ(y.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(y, torch::relu(h + bias.to(torch::kDouble))));
}

}  // namespace
}  // namespace torchmt
