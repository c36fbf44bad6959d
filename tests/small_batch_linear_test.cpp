// The few-row linear kernel used by decoding, on every instruction set: same results as
// at::linear (fp32, bf16, CPU bf16 autocast), one output alone bit for bit the whole call's at any
// thread count, and it steps aside where it does not apply; and the packed-weight GEMMs above it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "kernel_isa_support.h"
#include "kernels/primitives.h"
#include "model/linear.h"
#include "torchmt/util/device.h"
#include "test_support.h"

namespace torchmt {
namespace {

using namespace kernels;

class SmallBatchLinearTest : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(SmallBatchLinearTest);

struct Shape {
  int64_t rows, in, out;
};

// Sizes around the kernel's tiles: 4 rows x 4 outputs per block, 16 (fp32) or 32 (bf16)
// inputs per vector, with remainders everywhere.
const Shape kShapes[] = {{1, 256, 8000}, {5, 256, 768}, {8, 1024, 256}, {3, 40, 67}, {7, 16, 5}, {2, 33, 1}, {4, 7, 9}};

TEST_P(SmallBatchLinearTest, Fp32MatchesAtenLinear) {
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

// One output at a time (the screened greedy projection's fp32 logits) is the output of the whole
// call for every row count and any number of threads (each thread's share of the outputs starts
// and ends on other tile boundaries): bit for bit on the AVX2 and portable copies, and within the
// rounding of a K-term fp32 sum (the bound the screen allows for) on every copy.
TEST_P(SmallBatchLinearTest, OneOutputIsTheWholeCallsWithinTheSummationsRounding) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const int threads = at::get_num_threads();
  const bool bitwise = cpu_isa() < CpuIsa::kAvx512;
  for (int t : {1, 2, 3, 16}) {
    at::set_num_threads(t);
    for (const Shape& s : kShapes)
      for (bool with_bias : {true, false}) {
        auto x = torch::randn({s.rows, s.in}), w = torch::randn({s.out, s.in});
        auto b = with_bias ? torch::randn({s.out}) : torch::Tensor();
        auto all = try_small_batch_linear_cpu(x, w, b).contiguous();
        auto magnitude = x.abs().matmul(w.abs().t()) + (with_bias ? b.abs() : torch::zeros({s.out}));  // [rows, out]
        ASSERT_TRUE(all.defined());
        for (int64_t m = 0; m < s.rows; ++m)
          for (int64_t n = 0; n < s.out; n += std::max<int64_t>(1, s.out / 37)) {
            const float one = small_batch_dot_fp32(x[m].data_ptr<float>(), w[n].data_ptr<float>(),
                                                   with_bias ? b.data_ptr<float>() + n : nullptr, s.in);
            const float whole = all[m][n].item<float>();
            const std::string where = std::to_string(t) + " threads, " + std::to_string(s.rows) + "x" +
                                      std::to_string(s.in) + "x" + std::to_string(s.out) + " [" + std::to_string(m) +
                                      ", " + std::to_string(n) + "]";
            if (bitwise) {
              ASSERT_EQ(one, whole) << where;
            }
            // (K / 16 + 6) adds in a row, each off by at most 2^-24 of the magnitude summed.
            const double bound = (static_cast<double>(s.in) / 16 + 6) * std::ldexp(1.0, -24) * magnitude[m][n].item<double>();
            ASSERT_LE(std::fabs(static_cast<double>(one) - whole), bound) << where;
          }
      }
  }
  at::set_num_threads(threads);
}

TEST_P(SmallBatchLinearTest, Bf16EqualsFp32ResultRoundedOnce) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  for (const Shape& s : kShapes) {
    auto x = torch::randn({s.rows, s.in}).to(torch::kBFloat16), w = torch::randn({s.out, s.in}).to(torch::kBFloat16);
    auto b = torch::randn({s.out}).to(torch::kBFloat16);
    // AVX512-BF16 dot products at avx512-bf16, the fp32 FMA path below it.
    {
      auto ours = try_small_batch_linear_cpu(x, w, b);
      ASSERT_TRUE(ours.defined());
      EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
      // The exact product of the bf16 inputs, rounded to bf16 once: at most one bf16 step
      // (relative 2^-8) apart, plus fp32 accumulation-order noise near zero.
      auto exact = torch::linear(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble));
      EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble), exact, 1.0 / 128, 1e-3))
          << s.rows << "x" << s.in << "x" << s.out;
    }
  }
}

TEST_P(SmallBatchLinearTest, HonoursCpuBf16AutocastLikeAtenLinear) {
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

TEST_P(SmallBatchLinearTest, KeepsLeadingDimensionsAndReadsStridedInput) {
  torch::NoGradGuard no_grad;
  auto wide = torch::randn({64, 6});
  auto x = wide.t().slice(0, 0, 4).view({2, 2, 64}).contiguous().transpose(0, 1);  // strided [2, 2, 64]
  auto w = torch::randn({10, 64}), b = torch::randn({10});
  auto ours = try_small_batch_linear_cpu(x, w, b);
  ASSERT_TRUE(ours.defined());
  EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{2, 2, 10}));
  EXPECT_TRUE(torch::allclose(ours, torch::linear(x, w, b), 1e-5, 1e-4));
}

TEST_P(SmallBatchLinearTest, StepsAsideWhereItDoesNotApply) {
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

// The packed GEMMs, each in turn: at::linear's values for any number of rows against a weight
// packed once, and out of the way where they do not apply.
TEST(PackedLinearTest, EveryPackedGemmMatchesAtenLinear) {
  if (available_packed_gemms().empty()) GTEST_SKIP() << "this LibTorch has neither MKL's nor oneDNN's packed GEMM";
  torch::NoGradGuard no_grad;
  for (PackedGemm gemm : available_packed_gemms()) {
    SCOPED_TRACE(packed_gemm_name(gemm));
    torch::manual_seed(3);
    auto weight = torch::randn({300, 96});
    auto bias = torch::randn({300});
    const PackedWeights packed = pack_weight(weight, gemm);
    ASSERT_EQ(packed.gemm, gemm);
    for (int64_t rows : {9, 28, 64, 130}) {
      auto x = torch::randn({rows, 96});
      auto y = try_packed_linear(packed, x, bias);
      ASSERT_TRUE(y.defined()) << rows;
      EXPECT_TRUE(torch::allclose(y, torch::linear(x, weight, bias), 1e-5, 1e-5)) << rows;
      EXPECT_TRUE(torch::allclose(try_packed_linear(packed, x, {}), torch::linear(x, weight), 1e-5, 1e-5)) << rows;
    }
    auto x3 = torch::randn({4, 5, 96});  // leading dimensions kept
    auto y3 = try_packed_linear(packed, x3, bias);
    ASSERT_EQ(y3.sizes(), torch::IntArrayRef({4, 5, 300}));
    EXPECT_TRUE(torch::allclose(y3, torch::linear(x3, weight, bias), 1e-5, 1e-5));
    // Not for it: few rows, another width or dtype, grad mode.
    auto x = torch::randn({20, 96});
    EXPECT_FALSE(try_packed_linear(packed, torch::randn({8, 96}), bias).defined());
    EXPECT_FALSE(try_packed_linear(packed, torch::randn({20, 95}), bias).defined());
    EXPECT_FALSE(try_packed_linear(packed, x.to(torch::kBFloat16), bias).defined());
    torch::GradMode::set_enabled(true);
    EXPECT_FALSE(try_packed_linear(packed, x, bias).defined());
    torch::GradMode::set_enabled(false);
  }
  EXPECT_FALSE(try_packed_linear(pack_weight(torch::randn({30, 96}), PackedGemm::kAten), torch::randn({20, 96}), {})
                   .defined());  // nothing packed: the caller's at::linear runs
}

// The GEMM of a shape comes from the rule table, never from a timing: the same answer every time,
// nothing written to the cache directory, and TORCHMT_PACKED_GEMM forces it.
TEST(PackedLinearTest, TheGemmIsChosenByRulesNotByTiming) {
  if (std::getenv("TORCHMT_PACKED_GEMM")) GTEST_SKIP() << "TORCHMT_PACKED_GEMM forces the choice";
  test::TempDir dir;
  test::ScopedEnv cache("TORCHMT_CACHE_DIR", dir.path().c_str());
  const PackedGemm first = packed_gemm_for(40000, 16);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(packed_gemm_for(40000, 16), first);
  if (!available_packed_gemms().empty()) {
    EXPECT_NE(first, PackedGemm::kAten) << "a packed GEMM is available, the rules chose none";
  }
  torch::NoGradGuard no_grad;
  auto weight = torch::randn({123, 515}), x = torch::randn({40, 515});
  const PackedWeights packed = pack_weight(weight, packed_gemm_for(123, 515));
  if (packed.gemm != PackedGemm::kAten) {
    EXPECT_TRUE(torch::allclose(try_packed_linear(packed, x, {}), torch::linear(x, weight), 1e-5, 1e-5));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the choice wrote to the cache directory";
}

// A prepared layer packs its weight at its first call with more rows than the few-row kernel
// takes, not before (a translator decoding one sentence at a time keeps no packed copies), and
// once when four threads make that call together, each getting at::linear's values.
TEST(PackedLinearTest, ALayerPacksItsWeightAtItsFirstManyRowCallOnce) {
  constexpr int64_t kOut = 40000, kIn = 16;  // packed by the rule table at every level
  if (packed_gemm_for(kOut, kIn) == PackedGemm::kAten) GTEST_SKIP() << "no packed GEMM for this shape here";
  torch::manual_seed(11);
  torch::nn::Linear layer = make_linear(kIn, kOut);
  prepare_linears_for_inference(*layer, InferencePrecision::kFloat);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(packed_weight_bytes(*layer), 0) << "packed at preparation";
  auto few = torch::randn({kSmallBatchLinearMaxRows, kIn});
  EXPECT_TRUE(torch::allclose(apply_linear(layer, few), torch::linear(few, layer->weight, layer->bias), 1e-5, 1e-5));
  EXPECT_EQ(packed_weight_bytes(*layer), 0) << "packed by a few-row call";
  std::vector<at::Tensor> inputs, outputs(4);
  for (int i = 0; i < 4; ++i) inputs.push_back(torch::randn({kSmallBatchLinearMaxRows + 1 + 5 * i, kIn}));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      torch::NoGradGuard off;
      outputs[static_cast<size_t>(i)] = apply_linear(layer, inputs[static_cast<size_t>(i)]);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(torch::allclose(outputs[i], torch::linear(inputs[i], layer->weight, layer->bias), 1e-5, 1e-5)) << i;
  const int64_t packed = packed_weight_bytes(*layer);
  EXPECT_GE(packed, kOut * kIn * static_cast<int64_t>(sizeof(float)));
  apply_linear(layer, inputs[0]);
  EXPECT_EQ(packed_weight_bytes(*layer), packed) << "packed again";
}

}  // namespace
}  // namespace torchmt
