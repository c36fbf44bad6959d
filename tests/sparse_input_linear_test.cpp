// The linear kernel for inputs that are mostly zeros (a ReLU feed-forward layer's second Linear),
// on every instruction set: the dense product's values, each row's the same alone as in a batch
// of a few rows or of many (bit for bit), NaN inputs kept, and it steps aside where it does not
// apply; the model marks exactly its ReLU layers' second Linears and translates the same.
#include <gtest/gtest.h>

#include <limits>

#include <torch/torch.h>

#include "kernel_isa_support.h"
#include "kernels/primitives.h"
#include "torchmt/model/feed_forward.h"
#include "model/linear.h"

namespace torchmt {
namespace {

using namespace kernels;

class SparseInputLinearTest : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(SparseInputLinearTest);

// A ReLU's output: about three quarters zeros.
at::Tensor relu_like(int64_t rows, int64_t in) {
  return torch::randn({rows, in}).abs() * (torch::rand({rows, in}) >= 0.75);
}

TEST_P(SparseInputLinearTest, EqualsTheDenseProductAndEachRowAlone) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  struct Shape {
    int64_t rows, in, out;
  };
  // Many rows (above kSmallBatchLinearMaxRows) from AVX2 up for outputs in blocks of 64 (AVX-512
  // takes blocks of 256 where they fit, 192 outputs its AVX2 copy).
  for (const Shape s : {Shape{1, 2048, 512}, Shape{5, 96, 37}, Shape{8, 33, 8}, Shape{3, 7, 3}, Shape{2, 64, 1},
                        Shape{40, 1024, 256}, Shape{9, 37, 512}, Shape{33, 2048, 512}, Shape{21, 300, 192},
                        Shape{12, 50, 100}})
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out));
      auto x = relu_like(s.rows, s.in), w = torch::randn({s.out, s.in});
      x[s.rows - 1].zero_();  // a row without a nonzero input: the bias
      auto b = with_bias ? torch::randn({s.out}) : torch::Tensor();
      const auto packed = pack_sparse_input_weight(w, b);
      auto y = try_sparse_input_linear(*packed, x);
      const bool many_rows = cpu_isa() >= CpuIsa::kAvx2 && s.out % 64 == 0;
      if (s.rows > kSmallBatchLinearMaxRows && !many_rows) {
        EXPECT_FALSE(y.defined());
        continue;
      }
      ASSERT_TRUE(y.defined());
      ASSERT_EQ(y.sizes(), torch::IntArrayRef({s.rows, s.out}));
      auto exact = torch::linear(x.to(torch::kDouble), w.to(torch::kDouble),
                                 with_bias ? b.to(torch::kDouble) : torch::Tensor());
      EXPECT_TRUE(torch::allclose(y.to(torch::kDouble), exact, 1e-5, 1e-4));
      // Rows are independent: a sentence's output does not depend on what shares its batch.
      for (int64_t m = 0; m < s.rows; ++m)
        EXPECT_TRUE(torch::equal(try_sparse_input_linear(*packed, x.narrow(0, m, 1)), y.narrow(0, m, 1))) << m;
    }
}

TEST_P(SparseInputLinearTest, KeepsLeadingDimensionsAndNanInputs) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  // A few rows, and many in blocks of 64 outputs (the many-row kernels' nonzero lists from AVX2 up).
  for (int64_t rows : {int64_t{2}, 2 * kSmallBatchLinearMaxRows}) {
    const int64_t out = rows > kSmallBatchLinearMaxRows ? 64 : 24;
    auto w = torch::randn({out, 40}), b = torch::randn({out});
    const auto packed = pack_sparse_input_weight(w, b);
    auto x = relu_like(2 * rows, 40).reshape({2, rows, 40});  // [2, rows, 40]
    x[1][0][3] = std::numeric_limits<float>::quiet_NaN();
    x[1][1][39] = std::numeric_limits<float>::quiet_NaN();  // the last input, in the lists' tails
    auto y = try_sparse_input_linear(*packed, x);
    if (rows > kSmallBatchLinearMaxRows && cpu_isa() < CpuIsa::kAvx2) {
      EXPECT_FALSE(y.defined());
      continue;
    }
    ASSERT_TRUE(y.defined()) << rows;
    ASSERT_EQ(y.sizes(), torch::IntArrayRef({2, rows, out}));
    EXPECT_TRUE(torch::isnan(y[1][0]).all().item<bool>()) << "a NaN input reaches every output";
    EXPECT_TRUE(torch::isnan(y[1][1]).all().item<bool>());
    EXPECT_FALSE(torch::isnan(y[0]).any().item<bool>());
    EXPECT_FALSE(torch::isnan(y[1].narrow(0, 2, rows - 2)).any().item<bool>());
    EXPECT_TRUE(torch::allclose(y[0], torch::linear(x[0], w, b), 1e-5, 1e-4));
  }
}

TEST_P(SparseInputLinearTest, StepsAsideWhereItDoesNotApply) {
  torch::NoGradGuard no_grad;
  const auto packed = pack_sparse_input_weight(torch::randn({16, 32}), torch::randn({16}));
  // Many rows: only for outputs in blocks of 64 (this layer has 16), from AVX2 up.
  EXPECT_FALSE(try_sparse_input_linear(*packed, relu_like(kSmallBatchLinearMaxRows + 1, 32)).defined());
  for (int64_t width : {64, 256}) {
    const auto wide = pack_sparse_input_weight(torch::randn({width, 32}), torch::Tensor());
    EXPECT_EQ(try_sparse_input_linear(*wide, relu_like(kSmallBatchLinearMaxRows + 1, 32)).defined(),
              cpu_isa() >= CpuIsa::kAvx2);
  }
  EXPECT_FALSE(try_sparse_input_linear(*packed, relu_like(2, 31)).defined());
  EXPECT_FALSE(try_sparse_input_linear(*packed, relu_like(2, 32).to(torch::kBFloat16)).defined());
  EXPECT_FALSE(try_sparse_input_linear(*packed, relu_like(0, 32)).defined());
  torch::GradMode::set_enabled(true);
  EXPECT_FALSE(try_sparse_input_linear(*packed, relu_like(2, 32)).defined());
  torch::GradMode::set_enabled(false);
}

// Only a ReLU layer's second Linear takes the kernel; prepared for inference, the layer gives the
// unprepared layer's outputs (to the summation's rounding) at a few rows and at many.
TEST(SparseInputFeedForwardTest, ReluLayersOnlyAndTheSameOutputs) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  for (Activation activation : {Activation::kReLU, Activation::kGELU})
    for (int64_t embed : {32, 256}) {  // 256 outputs: many rows through the kernel from AVX2 up
      FeedForward ffn(FeedForwardOptions(embed, 4 * embed).dropout(0.0).activation(activation));
      ffn->eval();
      const auto* second = dynamic_cast<const QuantizableLinearImpl*>(ffn->linear2.get());
      ASSERT_NE(second, nullptr);
      EXPECT_EQ(second->sparse_input, activation == Activation::kReLU);
      EXPECT_FALSE(dynamic_cast<const QuantizableLinearImpl*>(ffn->linear1.get())->sparse_input);
      for (int64_t rows : {1, 3, 40}) {
        auto x = torch::randn({rows, 1, embed});
        auto before = ffn->forward(x);
        prepare_linears_for_inference(*ffn, InferencePrecision::kFloat);
        auto after = ffn->forward(x);
        release_inference_preparation(*ffn);
        EXPECT_TRUE(torch::allclose(after, before, 1e-5, 1e-5)) << rows;
      }
    }
}

// A translator's layer keeps one copy: the weight becomes the view of the kernel's W^T (the same
// values), the bytes of the old one are freed once, and the layer computes what it computed before,
// in inference at a few rows and at many, and with gradients on.
TEST(SparseInputFeedForwardTest, ATranslatingLayerKeepsOneCopyOfItsWeight) {
  torch::manual_seed(8);
  for (int64_t embed : {32, 256}) {
    FeedForward ffn(FeedForwardOptions(embed, 4 * embed).dropout(0.0).activation(Activation::kReLU));
    ffn->eval();
    const auto weight = ffn->linear2->weight.detach().clone();
    std::vector<torch::Tensor> inputs, before;
    prepare_linears_for_inference(*ffn, InferencePrecision::kFloat);
    {
      torch::NoGradGuard no_grad;
      for (int64_t rows : {1, 3, 40}) {
        inputs.push_back(torch::randn({rows, 1, embed}));
        before.push_back(ffn->forward(inputs.back()));
      }
    }
    EXPECT_EQ(release_float_weights(*ffn, nullptr), embed * 4 * embed * 4);
    EXPECT_EQ(release_float_weights(*ffn, nullptr), 0);  // one copy already
    const auto& shared = ffn->linear2->weight;
    EXPECT_FALSE(shared.is_contiguous());
    EXPECT_TRUE(shared.t().is_contiguous());
    EXPECT_TRUE(torch::equal(shared, weight));
    EXPECT_TRUE(ffn->linear1->weight.is_contiguous());  // not a sparse-input layer
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < inputs.size(); ++i) {
        // A few rows: the kernel's, the same bits; many: the kernel's or (where it steps aside) the
        // dense product's over the view, whose sums BLAS may order otherwise.
        if (inputs[i].size(0) <= kSmallBatchLinearMaxRows)
          EXPECT_TRUE(torch::equal(ffn->forward(inputs[i]), before[i])) << embed << " " << i;
        else
          EXPECT_TRUE(torch::allclose(ffn->forward(inputs[i]), before[i], 1e-5, 1e-5)) << embed << " " << i;
      }
    }
    auto trained = ffn->forward(inputs[1]);  // gradients on: the dense product over the view
    EXPECT_TRUE(torch::allclose(trained, before[1], 1e-5, 1e-5));
    trained.sum().backward();
    EXPECT_EQ(ffn->linear2->weight.grad().sizes(), weight.sizes());
  }
}

}  // namespace
}  // namespace torchmt
