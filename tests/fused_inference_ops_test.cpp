// The fused CPU inference passes (rotary positions, residual sum + LayerNorm): the values of
// the ATen composites they replace, in fp32 and bf16, and they step aside where they do not
// apply (gradients, autocast), so training differentiates the composite.
#include <limits>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "model/add_layer_norm.h"
#include "torchmt/model/rotary.h"
#include "torchmt/util/device.h"

#include "kernel_isa_support.h"
#include "kernels/primitives.h"

namespace torchmt {
namespace {

using namespace kernels;

class FusedInferenceOpsTest : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(FusedInferenceOpsTest);


at::Tensor rotary_composite(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos) {
  return x * cos + rotate_half(x) * sin;
}

// x [B, H, T, d] as split_heads leaves it: a transposed view of [B, T, H, d].
at::Tensor heads_view(int64_t b, int64_t h, int64_t t, int64_t d, torch::Dtype dtype) {
  return torch::randn({b, t, h, d}).to(dtype).transpose(1, 2);  // [B, H, T, d]
}

TEST_P(FusedInferenceOpsTest, RotaryMatchesCompositeFp32) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const int64_t b = 3, h = 4, t = 6, d = 32;
  auto x = heads_view(b, h, t, d, torch::kFloat);
  // Tables for every position ([T, d], a full pass), for one step ([1, d] at T = 1) and per row
  // ([B, 1, 1, d], rows at different positions).
  for (auto shape : {std::vector<int64_t>{t, d}, std::vector<int64_t>{b, 1, 1, d}}) {
    auto angles = torch::rand(shape) * 6.0;
    auto sin = angles.sin(), cos = angles.cos();
    auto ours = try_rotary_cpu(x, sin, cos);
    ASSERT_TRUE(ours.defined());
    EXPECT_EQ(ours.sizes(), x.sizes());
    EXPECT_TRUE(torch::allclose(ours, rotary_composite(x, sin, cos), 1e-6, 1e-6));
  }
  auto step = heads_view(b, h, 1, d, torch::kFloat);
  auto angles = torch::rand({1, d});
  auto ours = try_rotary_cpu(step, angles.sin(), angles.cos());
  ASSERT_TRUE(ours.defined());
  EXPECT_TRUE(torch::allclose(ours, rotary_composite(step, angles.sin(), angles.cos()), 1e-6, 1e-6));
}

TEST_P(FusedInferenceOpsTest, RotaryBf16RoundsAsTheComposite) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  auto x = heads_view(2, 2, 5, 16, torch::kBFloat16);
  auto angles = torch::rand({5, 16}) * 6.0;
  auto sin = angles.sin().to(torch::kBFloat16), cos = angles.cos().to(torch::kBFloat16);
  auto ours = try_rotary_cpu(x, sin, cos);
  ASSERT_TRUE(ours.defined());
  EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
  // One bf16 step (2^-8 relative) at most: an FMA may skip one of the composite's roundings.
  auto expected = rotary_composite(x, sin, cos).to(torch::kFloat);
  EXPECT_TRUE(torch::allclose(ours.to(torch::kFloat), expected, 8e-3, 8e-3));
}

TEST_P(FusedInferenceOpsTest, RotaryStepsAsideForTrainingAndOddShapes) {
  auto x = heads_view(1, 2, 3, 8, torch::kFloat);
  auto angles = torch::rand({3, 8});
  {
    torch::AutoGradMode grad(true);
    EXPECT_FALSE(try_rotary_cpu(x, angles.sin(), angles.cos()).defined());
    EXPECT_FALSE(rotary_cpu_applies(x, angles.sin().narrow(1, 0, 4), angles.cos().narrow(1, 0, 4)));
  }
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(try_rotary_cpu(x, angles.sin().narrow(1, 0, 4), angles.cos().narrow(1, 0, 4)).defined());  // d mismatch
  EXPECT_FALSE(try_rotary_cpu(x.to(torch::kDouble), angles.sin().to(torch::kDouble),
                              angles.cos().to(torch::kDouble)).defined());
  EXPECT_FALSE(try_rotary_cpu(x, angles.sin().to(torch::kBFloat16), angles.cos()).defined());  // mixed dtypes
  // apply_rotary_pos_emb gives the composite's values through either path.
  auto k = heads_view(1, 1, 3, 8, torch::kFloat);
  auto [q_out, k_out] = apply_rotary_pos_emb(x, k, angles.sin(), angles.cos());
  EXPECT_TRUE(torch::allclose(q_out, rotary_composite(x, angles.sin(), angles.cos()), 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(k_out, rotary_composite(k, angles.sin(), angles.cos()), 1e-6, 1e-6));
}

// Training's rotation: the kernel forward and its transpose backward give the composite's
// values and gradients, for every-position and per-row tables whose halves differ (the
// transpose must not assume RoPE's repeated frequencies), and for bf16 under the same roundings.
TEST_P(FusedInferenceOpsTest, RotaryGradientsMatchTheComposite) {
  torch::manual_seed(8);
  const int64_t b = 2, h = 3, t = 5, d = 8;
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (auto shape : {std::vector<int64_t>{t, d}, std::vector<int64_t>{b, 1, 1, d}}) {
      auto angles = torch::rand(shape) * 6.0;
      auto sin = angles.sin().to(dtype), cos = angles.cos().to(dtype);
      auto base = heads_view(b, h, t, d, dtype);
      auto upstream = torch::randn({b, h, t, d}).to(dtype);
      auto x1 = base.detach().requires_grad_(true), x2 = base.detach().requires_grad_(true);
      auto k = heads_view(b, 1, t, d, dtype).requires_grad_(true);
      auto [ours, k_out] = apply_rotary_pos_emb(x1, k, sin, cos);
      ASSERT_NE(ours.grad_fn(), nullptr);
      EXPECT_NE(ours.grad_fn()->name().find("RotaryFunction"), std::string::npos) << ours.grad_fn()->name();
      auto expected = rotary_composite(x2, sin, cos);
      (ours * upstream).sum().backward();
      (expected * upstream).sum().backward();
      const double tol = dtype == torch::kFloat ? 1e-6 : 2e-2;
      EXPECT_TRUE(torch::allclose(ours.to(torch::kFloat), expected.to(torch::kFloat), tol, tol)) << dtype;
      EXPECT_TRUE(torch::allclose(x1.grad().to(torch::kFloat), x2.grad().to(torch::kFloat), tol, tol)) << dtype;
    }
  }
  // bf16 projections with fp32 tables (bf16 autocast training): the rotation stays in bf16.
  {
    auto angles = torch::rand({t, d}) * 6.0;
    auto x = heads_view(b, h, t, d, torch::kBFloat16).requires_grad_(true);
    auto out = apply_rotary_pos_emb(x, x, angles.sin(), angles.cos()).first;
    EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
    auto y = x.detach().to(torch::kFloat).requires_grad_(true);
    auto expected = rotary_composite(y, angles.sin(), angles.cos());
    auto upstream = torch::randn({b, h, t, d});
    out.backward(upstream.to(torch::kBFloat16));
    expected.backward(upstream);
    EXPECT_TRUE(torch::allclose(out.to(torch::kFloat), expected, 3e-2, 3e-2));
    EXPECT_TRUE(torch::allclose(x.grad().to(torch::kFloat), y.grad(), 3e-2, 3e-2));
  }
  // A gradient in another layout (last dimension strided) is made contiguous first.
  auto angles = torch::rand({t, d});
  auto x = heads_view(b, h, t, d, torch::kFloat).requires_grad_(true);
  auto out = apply_rotary_pos_emb(x, x, angles.sin(), angles.cos()).first;
  auto upstream = torch::randn({b, h, d, t}).transpose(2, 3);  // [B, H, T, d], d strided
  out.backward(upstream);
  auto y = x.detach().requires_grad_(true);
  rotary_composite(y, angles.sin(), angles.cos()).backward(upstream);
  EXPECT_TRUE(torch::allclose(x.grad(), y.grad(), 1e-6, 1e-6));
}

TEST_P(FusedInferenceOpsTest, AddLayerNormMatchesCompositeFp32) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  // Widths with and without a 16-lane remainder; a row with a large mean (two-pass variance).
  for (int64_t d : {256, 20, 1}) {
    auto x = torch::randn({3, 5, d}), y = torch::randn({3, 5, d});
    x[1] += 1000.0;
    auto w = torch::randn({d}), b = torch::randn({d});
    auto [sum, out] = try_add_layer_norm_cpu(x, y, w, b, 1e-5);
    ASSERT_TRUE(out.defined()) << d;
    EXPECT_TRUE(torch::equal(sum, x + y)) << d;
    // Against the exact values (double precision): no further off than ATen's fp32 kernel.
    auto exact = torch::layer_norm((x + y).to(torch::kDouble), {d}, w.to(torch::kDouble), b.to(torch::kDouble), 1e-5);
    const double ours_error = (out.to(torch::kDouble) - exact).abs().max().item<double>();
    const double aten_error = (torch::layer_norm(x + y, {d}, w, b, 1e-5).to(torch::kDouble) - exact).abs().max().item<double>();
    EXPECT_LE(ours_error, std::max(2 * aten_error, 1e-5)) << d << ": ours " << ours_error << ", ATen " << aten_error;
  }
}

TEST_P(FusedInferenceOpsTest, AddLayerNormBf16) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  const int64_t d = 48;
  auto x = torch::randn({4, d}).to(torch::kBFloat16), y = torch::randn({4, d}).to(torch::kBFloat16);
  auto w = torch::randn({d}).to(torch::kBFloat16), b = torch::randn({d}).to(torch::kBFloat16);
  auto [sum, out] = try_add_layer_norm_cpu(x, y, w, b, 1e-5);
  ASSERT_TRUE(out.defined());
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(sum, x + y));
  auto expected = torch::layer_norm(x + y, {d}, w, b, 1e-5).to(torch::kFloat);
  EXPECT_TRUE(torch::allclose(out.to(torch::kFloat), expected, 1e-2, 2e-2));
}

TEST_P(FusedInferenceOpsTest, AddLayerNormModuleHelperUsesTheCompositeForTraining) {
  torch::manual_seed(9);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({16}));
  torch::nn::init::normal_(norm->weight);
  torch::nn::init::normal_(norm->bias);
  auto x = torch::randn({2, 3, 16}, torch::requires_grad()), y = torch::randn({2, 3, 16});
  at::Tensor sum;
  auto out = add_layer_norm(norm, x, y, &sum);  // grad mode on: differentiable (the training path)
  ASSERT_TRUE(out.requires_grad());
  out.sum().backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(torch::equal(sum, x + y));
  torch::NoGradGuard no_grad;
  at::Tensor fused_sum;
  auto fused = add_layer_norm(norm, x, y, &fused_sum);
  EXPECT_TRUE(torch::equal(fused_sum, sum));
  EXPECT_TRUE(torch::allclose(fused, out, 1e-5, 1e-5));
  {
    AutocastGuard autocast(torch::kCPU, torch::kBFloat16);  // autocast's layer_norm runs in fp32
    EXPECT_FALSE(try_add_layer_norm_cpu(x, y, norm->weight, norm->bias, 1e-5).first.defined());
  }
  EXPECT_FALSE(try_add_layer_norm_cpu(x, y.transpose(0, 1).contiguous().transpose(0, 1), norm->weight, norm->bias,
                                      1e-5).first.defined());  // not contiguous
  EXPECT_FALSE(try_add_layer_norm_cpu(x, y.narrow(2, 0, 8), norm->weight, norm->bias, 1e-5).first.defined());
}

// The decoder's in-place log-softmax: ATen's values for row widths on and off the 8-lane step,
// with -inf entries (a forced or masked token) and a row of -inf (ATen's NaNs), and it leaves
// alone what it does not handle.
TEST_P(FusedInferenceOpsTest, LogSoftmaxInPlaceMatchesAten) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  for (int64_t n : {8000, 37, 8, 3}) {
    auto x = torch::randn({6, n}) * 4;
    x[1][0] = -std::numeric_limits<float>::infinity();
    x[2].fill_(-std::numeric_limits<float>::infinity());
    x[3][n - 1] = 60.f;  // one dominant logit: the others' exponentials far below 1
    x[5][n / 2] = std::numeric_limits<float>::quiet_NaN();  // a NaN makes its row NaN, as in ATen
    auto expected = torch::log_softmax(x, -1);
    auto y = x.clone();
    const void* data = y.data_ptr();
    ASSERT_TRUE(try_log_softmax_in_place_cpu(y)) << n;
    EXPECT_EQ(y.data_ptr(), data);  // in place
    auto finite = torch::isfinite(expected);
    EXPECT_TRUE(torch::equal(finite, torch::isfinite(y))) << n;
    EXPECT_TRUE(torch::allclose(y.masked_select(finite), expected.masked_select(finite), 1e-5, 1e-5)) << n;
    EXPECT_TRUE(torch::equal(torch::isnan(y), torch::isnan(expected))) << n;  // the all -inf row
    // Rows are independent: a row alone gives what it gives among the others.
    auto row = x.narrow(0, 4, 1).clone();
    ASSERT_TRUE(try_log_softmax_in_place_cpu(row));
    EXPECT_TRUE(torch::equal(row, y.narrow(0, 4, 1)));
  }
  auto bf16 = torch::randn({2, 16}).to(torch::kBFloat16);
  EXPECT_FALSE(try_log_softmax_in_place_cpu(bf16));
  auto strided = torch::randn({16, 2}).t();
  EXPECT_FALSE(try_log_softmax_in_place_cpu(strided));
  {
    torch::AutoGradMode grad(true);
    auto leaf = torch::randn({2, 16}, torch::requires_grad());
    EXPECT_FALSE(try_log_softmax_in_place_cpu(leaf));
  }
}

}  // namespace
}  // namespace torchmt
