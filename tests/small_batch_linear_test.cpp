// The few-row linear kernel used by decoding: same results as at::linear (fp32, bf16, CPU
// bf16 autocast), and it steps aside where it does not apply; and the packed-weight GEMM above it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <torch/torch.h>

#include "torchmt/model/packed_linear.h"
#include "torchmt/model/small_batch_linear.h"
#include "torchmt/util/device.h"
#include "test_support.h"

namespace torchmt {
namespace {

struct Shape {
  int64_t rows, in, out;
};

// Sizes around the kernel's tiles: 4 rows x 4 outputs per block, 16 (fp32) or 32 (bf16)
// inputs per vector, with remainders everywhere.
const Shape kShapes[] = {{1, 256, 8000}, {5, 256, 768}, {8, 1024, 256}, {3, 40, 67}, {7, 16, 5}, {2, 33, 1}, {4, 7, 9}};

TEST(SmallBatchLinearTest, Fp32MatchesAtenLinear) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  for (const Shape& s : kShapes)
    for (bool with_bias : {true, false}) {
      auto x = torch::randn({s.rows, s.in}), w = torch::randn({s.out, s.in});
      auto b = with_bias ? torch::randn({s.out}) : torch::Tensor();
      auto ours = try_small_batch_linear_cpu(x, w, b);
      ASSERT_TRUE(ours.defined()) << s.rows << "x" << s.in << "x" << s.out;
      EXPECT_EQ(ours.scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::allclose(ours, torch::linear(x, w, b), 1e-5, 1e-4)) << s.rows << "x" << s.in << "x" << s.out;
    }
}

// One output at a time (the screened greedy projection's fp32 logits) is bit for bit the
// output of the whole call, for every row count.
TEST(SmallBatchLinearTest, OneOutputEqualsTheWholeCallsBitForBit) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  for (const Shape& s : kShapes)
    for (bool with_bias : {true, false}) {
      auto x = torch::randn({s.rows, s.in}), w = torch::randn({s.out, s.in});
      auto b = with_bias ? torch::randn({s.out}) : torch::Tensor();
      auto all = try_small_batch_linear_cpu(x, w, b).contiguous();
      ASSERT_TRUE(all.defined());
      for (int64_t m = 0; m < s.rows; ++m)
        for (int64_t n = 0; n < s.out; n += std::max<int64_t>(1, s.out / 37)) {
          const float one = small_batch_dot_fp32(x[m].data_ptr<float>(), w[n].data_ptr<float>(),
                                                 with_bias ? b.data_ptr<float>() + n : nullptr, s.in);
          ASSERT_EQ(one, all[m][n].item<float>()) << s.rows << "x" << s.in << "x" << s.out << " [" << m << ", " << n << "]";
        }
    }
}

TEST(SmallBatchLinearTest, Bf16EqualsFp32ResultRoundedOnce) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  for (const Shape& s : kShapes) {
    auto x = torch::randn({s.rows, s.in}).to(torch::kBFloat16), w = torch::randn({s.out, s.in}).to(torch::kBFloat16);
    auto b = torch::randn({s.out}).to(torch::kBFloat16);
    // AVX512-BF16 dot products where this CPU has them, the fp32 FMA path in any case.
    for (bool use_bf16_dot : {true, false}) {
      auto ours = try_small_batch_linear_cpu(x, w, b, use_bf16_dot);
      ASSERT_TRUE(ours.defined());
      EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
      // The exact product of the bf16 inputs, rounded to bf16 once: at most one bf16 step
      // (relative 2^-8) apart, plus fp32 accumulation-order noise near zero.
      auto exact = torch::linear(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble));
      EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble), exact, 1.0 / 128, 1e-3))
          << s.rows << "x" << s.in << "x" << s.out << (use_bf16_dot ? " dot" : " fma");
    }
  }
}

TEST(SmallBatchLinearTest, HonoursCpuBf16AutocastLikeAtenLinear) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto x = torch::randn({5, 1, 256}), w = torch::randn({300, 256}), b = torch::randn({300});
  torch::Tensor ours, aten;
  {
    AutocastGuard autocast(torch::Device(torch::kCPU), torch::kBFloat16);
    ours = try_small_batch_linear_cpu(x, w, b);
    aten = torch::linear(x, w, b);
  }
  ASSERT_TRUE(ours.defined());
  EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(ours.sizes(), aten.sizes());  // [5, 1, 300]
  EXPECT_TRUE(torch::allclose(ours.to(torch::kFloat), aten.to(torch::kFloat), 1.0 / 128, 1e-2));
}

TEST(SmallBatchLinearTest, KeepsLeadingDimensionsAndReadsStridedInput) {
  torch::NoGradGuard no_grad;
  auto wide = torch::randn({64, 6});
  auto x = wide.t().slice(0, 0, 4).view({2, 2, 64}).contiguous().transpose(0, 1);  // strided [2, 2, 64]
  auto w = torch::randn({10, 64}), b = torch::randn({10});
  auto ours = try_small_batch_linear_cpu(x, w, b);
  ASSERT_TRUE(ours.defined());
  EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{2, 2, 10}));
  EXPECT_TRUE(torch::allclose(ours, torch::linear(x, w, b), 1e-5, 1e-4));
}

TEST(SmallBatchLinearTest, StepsAsideWhereItDoesNotApply) {
  auto w = torch::randn({6, 8}), b = torch::randn({6});
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(try_small_batch_linear_cpu(torch::randn({kSmallBatchLinearMaxRows + 1, 8}), w, b).defined());
    EXPECT_FALSE(try_small_batch_linear_cpu(torch::randn({2, 7}), w, b).defined());  // wrong width
    EXPECT_FALSE(try_small_batch_linear_cpu(torch::randn({2, 8}).to(torch::kDouble), w, b).defined());
    EXPECT_TRUE(try_small_batch_linear_cpu(torch::randn({kSmallBatchLinearMaxRows, 8}), w, b).defined());
  }
  // Training needs autograd: with grad mode on, at::linear does the work.
  EXPECT_FALSE(try_small_batch_linear_cpu(torch::randn({2, 8}), w.requires_grad_(), b).defined());
}

}  // namespace
}  // namespace torchmt

namespace torchmt {
namespace {

// The packed GEMMs (packed_linear.h), each forced in turn: at::linear's values for any number
// of rows against a weight packed once, packed again when the weight changes, and out of the
// way where they do not apply.
TEST(PackedLinearTest, EveryPackedGemmMatchesAtenLinearAndFollowsTheWeight) {
  if (!PackedWeightCache::available()) GTEST_SKIP() << "this LibTorch has neither MKL's nor oneDNN's packed GEMM";
  torch::NoGradGuard no_grad;
  for (PackedGemm gemm : PackedWeightCache::available_gemms()) {
    SCOPED_TRACE(packed_gemm_name(gemm));
    PackedWeightCache::force_gemm(gemm);
    torch::manual_seed(3);
    auto weight = torch::randn({300, 96});
    auto bias = torch::randn({300});
    PackedWeightCache cache;
    for (int64_t rows : {9, 28, 64, 130}) {
      auto x = torch::randn({rows, 96});
      auto y = cache.try_linear(x, weight, bias, 8);
      ASSERT_TRUE(y.defined()) << rows;
      EXPECT_TRUE(torch::allclose(y, torch::linear(x, weight, bias), 1e-5, 1e-5)) << rows;
      EXPECT_TRUE(torch::allclose(cache.try_linear(x, weight, {}, 8), torch::linear(x, weight), 1e-5, 1e-5)) << rows;
    }
    auto x3 = torch::randn({4, 5, 96});  // leading dimensions kept
    auto y3 = cache.try_linear(x3, weight, bias, 8);
    ASSERT_EQ(y3.sizes(), torch::IntArrayRef({4, 5, 300}));
    EXPECT_TRUE(torch::allclose(y3, torch::linear(x3, weight, bias), 1e-5, 1e-5));
    weight.mul_(-2.0);  // an in-place update (an optimizer step, a load): packed again
    auto x = torch::randn({20, 96});
    EXPECT_TRUE(torch::allclose(cache.try_linear(x, weight, bias, 8), torch::linear(x, weight, bias), 1e-5, 1e-5));
    // Not for it: few rows, grad mode, another dtype.
    EXPECT_FALSE(cache.try_linear(torch::randn({8, 96}), weight, bias, 8).defined());
    EXPECT_FALSE(cache.try_linear(x.to(torch::kBFloat16), weight, bias, 8).defined());
    torch::GradMode::set_enabled(true);
    EXPECT_FALSE(cache.try_linear(x, weight, bias, 8).defined());
    torch::GradMode::set_enabled(false);
  }
  PackedWeightCache::force_gemm(std::nullopt);
}

// Unforced, the first weight of a shape is measured with every GEMM and at::linear, the
// fastest is written to the probe cache with its figures, and the result is at::linear's
// whichever won (undefined where at::linear did: the caller then runs it).
TEST(PackedLinearTest, TheGemmIsMeasuredOncePerShapeAndRemembered) {
  if (!PackedWeightCache::available()) GTEST_SKIP() << "this LibTorch has neither MKL's nor oneDNN's packed GEMM";
  if (std::getenv("TORCHMT_PACKED_GEMM")) GTEST_SKIP() << "TORCHMT_PACKED_GEMM forces the choice";
  test::TempDir dir;
  const char* old = std::getenv("TORCHMT_CACHE_DIR");
  const std::string old_value = old ? old : "";
  setenv("TORCHMT_CACHE_DIR", dir.path().c_str(), 1);
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto weight = torch::randn({123, 77}), bias = torch::randn({123});  // a shape no other test uses
  auto x = torch::randn({40, 77});
  PackedWeightCache cache;
  auto y = cache.try_linear(x, weight, bias, 8);
  if (y.defined()) {
    EXPECT_TRUE(torch::allclose(y, torch::linear(x, weight, bias), 1e-5, 1e-5));
  }
  if (old)
    setenv("TORCHMT_CACHE_DIR", old_value.c_str(), 1);
  else
    unsetenv("TORCHMT_CACHE_DIR");

  std::ifstream in(dir.file("gemm-probe.tsv"));
  ASSERT_TRUE(in) << "no probe record written";
  std::string line, found;
  while (std::getline(in, line))
    if (line.find("|linear 77x123\t") != std::string::npos) found = line;
  ASSERT_FALSE(found.empty());
  const std::string value = found.substr(found.find('\t') + 1, found.rfind('\t') - found.find('\t') - 1);
  EXPECT_TRUE(value == "aten" || value == "mkl" || value == "onednn") << found;
  EXPECT_EQ(y.defined(), value != "aten") << found;
  EXPECT_NE(found.find("aten "), std::string::npos) << found;  // the figures it chose by
  EXPECT_NE(found.find(" at 40 rows"), std::string::npos) << found;

  // Forced to at::linear: nothing packed, the caller's at::linear runs.
  PackedWeightCache::force_gemm(PackedGemm::kAten);
  PackedWeightCache other;
  EXPECT_FALSE(other.try_linear(x, weight, bias, 8).defined());
  PackedWeightCache::force_gemm(std::nullopt);
}

}  // namespace
}  // namespace torchmt
