// Training's LayerNorm kernels (kernels::layer_norm_training_forward / _backward) against ATen's
// layer_norm and its autograd, and the model's layer_norm() that chooses them.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "kernel_isa_support.h"
#include "kernels/primitives.h"
#include "model/add_layer_norm.h"

namespace torchmt {
namespace {

class LayerNormKernel : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(LayerNormKernel);

// Row widths: under one vector, vectors and a tail, whole vectors; 300 rows: several blocks of
// the gradient sums and a partial one.
const std::vector<int64_t> kDims = {7, 37, 256};

TEST_P(LayerNormKernel, ForwardAndGradientsAreAtensInFp32Arithmetic) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const int64_t dim : kDims) {
      torch::manual_seed(dim);
      // A large mean against the spread in some rows: the moments must keep their low bits.
      auto x = (torch::randn({3, 100, dim}) + torch::randint(0, 2, {3, 100, 1}) * 40).to(dtype);
      auto weight = torch::randn({dim}), bias = torch::randn({dim});
      auto upstream = torch::randn({3, 100, dim}).to(dtype);
      auto [y, mean, rstd] = kernels::layer_norm_training_forward(x, weight, bias, 1e-5);
      ASSERT_EQ(y.scalar_type(), dtype);
      auto [grad_x, grad_weight, grad_bias] = kernels::layer_norm_training_backward(upstream, x, mean, rstd, weight);
      ASSERT_EQ(grad_x.scalar_type(), dtype);
      ASSERT_EQ(grad_weight.scalar_type(), torch::kFloat);

      // ATen in fp32 on the same values (the bf16 ones widened), rounded as the kernel rounds.
      auto xf = x.to(torch::kFloat).requires_grad_();
      auto wf = weight.clone().requires_grad_(), bf = bias.clone().requires_grad_();
      auto expected = torch::layer_norm(xf, {dim}, wf, bf, 1e-5);
      (expected * upstream.to(torch::kFloat)).sum().backward();
      const double rel = dtype == torch::kFloat ? 1e-4 : 1.0 / 64;
      EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), expected.detach().to(dtype).to(torch::kFloat), rel, 1e-4))
          << dtype << " dim " << dim;
      EXPECT_TRUE(torch::allclose(grad_x.to(torch::kFloat), xf.grad().to(dtype).to(torch::kFloat), rel, 1e-3))
          << dtype << " dim " << dim << " max error "
          << (grad_x.to(torch::kFloat) - xf.grad()).abs().max().item<float>();
      EXPECT_TRUE(torch::allclose(grad_weight, wf.grad(), 1e-3, 1e-3)) << dtype << " dim " << dim;
      EXPECT_TRUE(torch::allclose(grad_bias, bf.grad(), 1e-4, 1e-3)) << dtype << " dim " << dim;
    }
  }
}

TEST_P(LayerNormKernel, TheSameResultsOnAnyThreadCount) {
  auto x = torch::randn({300, 37}).to(torch::kBFloat16);
  auto weight = torch::randn({37}), bias = torch::randn({37});
  auto upstream = torch::randn({300, 37}).to(torch::kBFloat16);
  const int threads = torch::get_num_threads();
  auto run = [&](int n) {
    torch::set_num_threads(n);
    auto [y, mean, rstd] = kernels::layer_norm_training_forward(x, weight, bias, 1e-5);
    auto [gx, gw, gb] = kernels::layer_norm_training_backward(upstream, x, mean, rstd, weight);
    return std::vector<torch::Tensor>{y, mean, rstd, gx, gw, gb};
  };
  const auto one = run(1), two = run(2);
  torch::set_num_threads(threads);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << i;
}

TEST(LayerNorm, TheModelsLayerNormIsTheModuleInEveryMode) {
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({37}));
  {
    torch::NoGradGuard no_grad;
    norm->weight.normal_();
    norm->bias.normal_();
  }
  auto x = torch::randn({4, 9, 37}, torch::requires_grad());
  norm->eval();
  auto reference = norm(x);
  EXPECT_TRUE(torch::equal(layer_norm(norm, x), reference));  // eval: the module itself
  norm->train();
  auto y = layer_norm(norm, x);  // training: the kernels, with gradients to all three
  EXPECT_TRUE(torch::allclose(y, reference, 1e-5, 1e-5));
  auto upstream = torch::randn({4, 9, 37});
  (y * upstream).sum().backward();
  const auto grads = std::vector<torch::Tensor>{x.grad().clone(), norm->weight.grad().clone(), norm->bias.grad().clone()};
  x.mutable_grad().reset();
  norm->zero_grad();
  norm->eval();
  (norm(x) * upstream).sum().backward();
  EXPECT_TRUE(torch::allclose(grads[0], x.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(grads[1], norm->weight.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(grads[2], norm->bias.grad(), 1e-4, 1e-5));
  // Other dtypes keep the module.
  norm->train();
  auto xd = torch::randn({2, 37}, torch::kDouble);
  norm->to(torch::kDouble);
  EXPECT_TRUE(torch::equal(layer_norm(norm, xd), norm(xd)));
}

}  // namespace
}  // namespace torchmt
