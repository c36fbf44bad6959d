// The searches' per-row top-k against a full sort of each row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <torch/torch.h>


#include "kernel_isa_support.h"
#include "kernels/primitives.h"

namespace torchmt {
namespace {

using namespace kernels;

class RowTopK : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(RowTopK);


TEST_P(RowTopK, EqualsASortedRowWithTiesInIndexOrderAndNanLast) {
  torch::manual_seed(11);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 5, 16, 17, 40, 1000}) {
    for (int64_t k : {1, 2, 5, 10, 16}) {
      if (k > n) continue;
      // Small integers: many ties; some -inf and NaN, and a row of -inf only.
      auto x = torch::randint(-20, 20, {7, n}).to(torch::kFloat);
      x.index_put_({x.eq(-20)}, -inf);
      x.index_put_({x.eq(19)}, std::nanf(""));
      x[3].fill_(-inf);
      if (n > 3) x[4][n - 1] = 100.0f;  // the best at the very end
      auto [values, indices] = row_top_k(x, k);
      ASSERT_EQ(values.sizes(), torch::IntArrayRef({7, k}));
      for (int64_t r = 0; r < 7; ++r) {
        std::vector<int64_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        auto value = [&](int64_t j) {
          const float v = x[r][j].item<float>();
          return std::isnan(v) ? -inf : v;
        };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return value(a) > value(b); });
        for (int64_t c = 0; c < k; ++c) {
          EXPECT_EQ(indices[r][c].item<int64_t>(), order[c]) << "n " << n << " k " << k << " row " << r << " rank " << c;
          EXPECT_EQ(values[r][c].item<float>(), value(order[c]));
        }
      }
    }
  }
}

// Blocked entries (a shortlist's) count as -inf: the same as the top-k of the row with -inf
// written there, on every vector width's body and tail.
TEST_P(RowTopK, BlockedEntriesAreTheSameAsMinusInfinity) {
  torch::manual_seed(12);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 7, 8, 16, 17, 40, 1000}) {
    for (int64_t k : {1, 3, 16}) {
      if (k > n) continue;
      auto x = torch::randint(-20, 20, {6, n}).to(torch::kFloat);
      x.index_put_({x.eq(19)}, std::nanf(""));
      auto blocked = torch::rand({6, n}).lt(0.7);
      blocked[0].fill_(true);   // nothing open
      blocked[1].fill_(false);  // everything open
      if (n > 2) {
        x[2][n - 1] = 100.0f;  // the best, blocked: must not come out
        blocked[2][n - 1] = true;
      }
      auto [values, indices] = row_top_k(x, k, blocked);
      auto [expected_values, expected_indices] = row_top_k(x.masked_fill(blocked, -inf), k);
      EXPECT_TRUE(torch::equal(indices, expected_indices)) << "n " << n << " k " << k;
      EXPECT_TRUE(torch::equal(values, expected_values)) << "n " << n << " k " << k;
      // Torch's path (another dtype; it ranks NaN first, so none here) takes the mask too.
      const auto plain = x.nan_to_num(-50.0f);
      auto [other_values, other_indices] = row_top_k(plain.to(torch::kDouble), 1, blocked);
      EXPECT_TRUE(torch::equal(other_values.to(torch::kFloat), row_top_k(plain, 1, blocked).first));
    }
  }
  EXPECT_THROW(row_top_k(torch::zeros({2, 3}), 1, torch::zeros({2, 2}, torch::kBool)), c10::Error);
}

TEST_P(RowTopK, OtherTypesGoThroughTorchTopk) {
  auto x = torch::tensor({{1.0, 3.0, 2.0}}, torch::kDouble);
  auto [values, indices] = row_top_k(x, 2);
  EXPECT_TRUE(torch::equal(indices, torch::tensor({{1, 2}}, torch::kLong)));
  auto [best, at] = row_top_k(x, 1);
  EXPECT_EQ(at.item<int64_t>(), 1);
  EXPECT_THROW(row_top_k(torch::zeros({2, 3}), 4), c10::Error);
}

}  // namespace
}  // namespace torchmt
