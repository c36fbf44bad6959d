// The CPU inference attention kernel (decoding steps, forced decoding, the encoder) equals
// softmax(q k^T / sqrt(d) + mask) v, each query row on its own.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include <torch/torch.h>


#include "kernel_isa_support.h"
#include "kernels/primitives.h"

namespace torchmt {
namespace {

using namespace kernels;

class AttentionRowsTest : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(AttentionRowsTest);


// The textbook formula in double, heads merged: [B, Tq, H * d].
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask) {
  auto qd = q.to(torch::kDouble), kd = k.to(torch::kDouble), vd = v.to(torch::kDouble);
  auto scores = torch::matmul(qd, kd.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));  // [B, H, Tq, T]
  if (mask.defined()) scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  auto out = torch::matmul(torch::softmax(scores, -1), vd);  // [B, H, Tq, d]
  return out.transpose(1, 2).reshape({q.size(0), q.size(2), -1});  // [B, Tq, H * d]
}

TEST_P(AttentionRowsTest, Fp32MatchesFormulaWithMaskAndStridedKeys) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  for (int64_t dim : {64, 20}) {  // 20: a partial vector per row
    const int64_t B = 3, H = 4, T = 11;
    auto q = torch::randn({B, H, 1, dim});
    // k, v as split_heads makes them: [B, T, H, d] viewed as [B, H, T, d]
    auto k = torch::randn({B, T, H, dim}).transpose(1, 2), v = torch::randn({B, T, H, dim}).transpose(1, 2);
    auto mask = torch::rand({B, 1, 1, T}) > 0.3;
    mask.index_put_({torch::indexing::Slice(), 0, 0, 0}, true);
    auto ours = try_attention_rows_cpu(q, k, v, mask);
    ASSERT_TRUE(ours.defined());
    EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{B, 1, H * dim}));
    EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble), reference(q, k, v, mask), 1e-5, 1e-6)) << "d " << dim;
    auto unmasked = try_attention_rows_cpu(q, k, v, torch::Tensor());
    EXPECT_TRUE(torch::allclose(unmasked.to(torch::kDouble), reference(q, k, v, torch::Tensor()), 1e-5, 1e-6));
  }
}

// The beams of a sentence share its K/V and mask row: query row b reads row b / r, the
// same values as r copies of each row, bit for bit, in fp32 and bf16, with grouped heads.
TEST_P(AttentionRowsTest, RowsSharingKeyValueRowsEqualCopiedRows) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  const int64_t sentences = 3, r = 4, H = 4, G = 2, T = 9, dim = 32;
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto q = torch::randn({sentences * r, H, 1, dim}).to(dtype);
    auto k = torch::randn({sentences, G, T, dim}).to(dtype), v = torch::randn({sentences, G, T, dim}).to(dtype);
    auto mask = torch::rand({sentences, 1, 1, T}) > 0.3;
    mask.index_put_({torch::indexing::Slice(), 0, 0, 0}, true);
    auto shared = try_attention_rows_cpu(q, k, v, mask);
    auto copied = try_attention_rows_cpu(q, k.repeat_interleave(r, 0), v.repeat_interleave(r, 0),
                                                 mask.repeat_interleave(r, 0));
    ASSERT_TRUE(shared.defined() && copied.defined());
    EXPECT_TRUE(torch::equal(shared, copied));
  }
  // Rows that do not divide: not this kernel's case.
  EXPECT_FALSE(try_attention_rows_cpu(torch::randn({5, H, 1, dim}), torch::randn({2, G, T, dim}),
                                              torch::randn({2, G, T, dim}), torch::Tensor())
                   .defined());
}

// Masked keys before a row's first allowed key (rows that joined a running batch) and after
// its last (source padding) are skipped: each row equals the formula, and bit for bit the
// same row with only its keys [first allowed, last allowed] given.
TEST_P(AttentionRowsTest, KeysOutsideTheAllowedRangeAreSkippedExactly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  const int64_t B = 3, H = 4, G = 2, T = 9, dim = 64;
  auto q = torch::randn({B, H, 1, dim}), k = torch::randn({B, G, T, dim}), v = torch::randn({B, G, T, dim});
  auto mask = torch::zeros({B, 1, 1, T}, torch::kBool);
  const std::vector<std::pair<int64_t, int64_t>> allowed = {{2, 7}, {0, 5}, {3, 9}};
  for (int64_t b = 0; b < B; ++b) mask[b][0][0].narrow(0, allowed[b].first, allowed[b].second - allowed[b].first).fill_(true);
  mask[0][0][0][4] = false;  // a masked key inside the range
  auto ours = try_attention_rows_cpu(q, k, v, mask);
  ASSERT_TRUE(ours.defined());
  EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble),
                              reference(q, k.repeat_interleave(H / G, 1), v.repeat_interleave(H / G, 1), mask), 1e-5,
                              1e-6));
  for (int64_t b = 0; b < B; ++b) {
    const auto [lo, hi] = allowed[b];
    auto row = try_attention_rows_cpu(q.narrow(0, b, 1), k.narrow(0, b, 1).narrow(2, lo, hi - lo),
                                              v.narrow(0, b, 1).narrow(2, lo, hi - lo),
                                              mask.narrow(0, b, 1).narrow(3, lo, hi - lo));
    ASSERT_TRUE(row.defined());
    EXPECT_TRUE(torch::equal(row, ours.narrow(0, b, 1))) << "row " << b;
  }
}

TEST_P(AttentionRowsTest, FullyMaskedKeysAttendToAll) {
  torch::NoGradGuard no_grad;
  auto q = torch::randn({2, 2, 1, 16}), k = torch::randn({2, 2, 5, 16}), v = torch::randn({2, 2, 5, 16});
  auto mask = torch::ones({2, 1, 1, 5}, torch::kBool);
  mask[1].fill_(false);  // sentence 1 has no key it may attend to
  auto ours = try_attention_rows_cpu(q, k, v, mask);
  ASSERT_TRUE(ours.defined());
  EXPECT_FALSE(ours.isnan().any().item<bool>());
  EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble), reference(q, k, v, torch::Tensor()), 1e-5, 1e-6));
}

TEST_P(AttentionRowsTest, Bf16IsTheFormulaOnBf16ValuesRoundedOnce) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  auto q = torch::randn({5, 4, 1, 64}).to(torch::kBFloat16);
  auto k = torch::randn({5, 4, 17, 64}).to(torch::kBFloat16), v = torch::randn({5, 4, 17, 64}).to(torch::kBFloat16);
  auto ours = try_attention_rows_cpu(q, k, v, torch::Tensor());
  ASSERT_TRUE(ours.defined());
  EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble), reference(q, k, v, torch::Tensor()), 1.0 / 128, 1e-3));
}

// Many query rows (the encoder's self-attention, a forced decoding's causal self-attention, the
// beams' cross-attention): each row equals the formula and, bit for bit, the same query row
// given alone with its mask row, so a forced decoding attends as the steps that produced it.
TEST_P(AttentionRowsTest, QueryRowsAreTheFormulaAndEachRowAlone) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  const int64_t B = 2, H = 4, G = 2, T = 7, dim = 64;
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto q = torch::randn({B, T, H, dim}).transpose(1, 2).to(dtype);  // [B, H, T, d], as split_heads gives
    auto k = torch::randn({B, G, T, dim}).to(dtype), v = torch::randn({B, G, T, dim}).to(dtype);
    auto padding = torch::ones({B, 1, 1, T}, torch::kBool);
    padding.index_put_({1, 0, 0, torch::indexing::Slice(5)}, false);
    auto causal = torch::ones({T, T}, torch::kBool).tril();  // [Tq, Tk]
    for (const auto& mask : {padding, padding & causal, torch::Tensor()}) {
      auto ours = try_attention_rows_cpu(q, k, v, mask);
      ASSERT_TRUE(ours.defined());
      EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{B, T, H * dim}));
      EXPECT_EQ(ours.scalar_type(), dtype);
      const double rtol = dtype == torch::kFloat ? 1e-5 : 1.0 / 128, atol = dtype == torch::kFloat ? 1e-6 : 1e-3;
      const auto expanded = mask.defined() ? mask.expand({B, 1, T, T}) : mask;
      EXPECT_TRUE(torch::allclose(ours.to(torch::kDouble),
                                  reference(q.to(torch::kFloat), k.repeat_interleave(H / G, 1).to(torch::kFloat),
                                            v.repeat_interleave(H / G, 1).to(torch::kFloat), expanded),
                                  rtol, atol));
      for (int64_t t = 0; t < T; ++t) {
        auto row = try_attention_rows_cpu(q.narrow(2, t, 1), k, v,
                                          mask.defined() ? expanded.narrow(2, t, 1) : mask);  // [B, 1, H * d]
        ASSERT_TRUE(row.defined());
        EXPECT_TRUE(torch::equal(row, ours.narrow(1, t, 1))) << "row " << t;
      }
    }
  }
}

// From avx2 up every level computes the same bits (one 8-lane order): int8 output must not
// depend on the CPU, and these values feed int8 layers.
TEST(AttentionRows, EveryLevelFromAvx2UpGivesTheSameBits) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(13);
  auto q = torch::randn({3, 4, 9, 64}), k = torch::randn({3, 2, 9, 64}), v = torch::randn({3, 2, 9, 64});
  auto mask = torch::rand({3, 1, 1, 9}) > 0.2;
  std::optional<torch::Tensor> first;
  for (CpuIsa isa : available_cpu_isas()) {
    if (isa < CpuIsa::kAvx2) continue;
    CpuIsaOverride level(isa);
    auto out = try_attention_rows_cpu(q, k, v, mask);
    ASSERT_TRUE(out.defined());
    if (!first) first = out;
    EXPECT_TRUE(torch::equal(out, *first)) << cpu_isa_name(isa);
  }
  if (!first) GTEST_SKIP() << "this CPU has no AVX2";
}

TEST_P(AttentionRowsTest, StepsAsideWhereItDoesNotApply) {
  auto k = torch::randn({1, 2, 3, 8}), v = torch::randn({1, 2, 3, 8});
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(try_attention_rows_cpu(torch::randn({1, 2, 0, 8}), k, v, {}).defined());  // no query
    EXPECT_FALSE(try_attention_rows_cpu(torch::randn({1, 2, 1, 8}).to(torch::kDouble), k, v, {}).defined());
    EXPECT_FALSE(try_attention_rows_cpu(torch::randn({1, 2, 1, 8}), k, v, torch::ones({1, 1, 1, 4}, torch::kBool))
                     .defined());  // mask of another length
    EXPECT_TRUE(try_attention_rows_cpu(torch::randn({1, 2, 1, 8}), k, v, {}).defined());
  }
  EXPECT_FALSE(try_attention_rows_cpu(torch::randn({1, 2, 1, 8}), k, v, {}).defined());  // grad mode on
}

}  // namespace
}  // namespace torchmt
