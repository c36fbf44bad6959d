// Dynamic int8 linear layers, on every instruction set: the kernel against the quantization
// formula computed in double, every instruction set's kernel equal to the portable loop bit for
// bit (the same integers, the same float steps), the model with and without int8.
#include <gtest/gtest.h>

#include <ATen/Version.h>
#include <torch/torch.h>

#include "data_test_support.h"
#include "kernel_isa_support.h"
#include "kernels/primitives.h"
#include "model/linear.h"
#include "model/masks.h"
#include "torchmt/model/transformer.h"

namespace torchmt {
namespace {

using namespace kernels;

class Int8Linear : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(Int8Linear);

// The documented formula: per-row symmetric quantization of weights (as quantize_rows_int8
// computes it, in float, 127 steps a side) and inputs (the kernels' float arithmetic: inverse =
// steps / max|x|, q = rint(x * inverse), 63 steps for a row with a negative value, 127 without),
// then the integer sums and scales in double.
// With a static range (input_amax > 0), every row uses it and its sign, values clamped to it.
at::Tensor reference_int8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, float input_amax = 0.f,
                          bool input_signed = true) {
  auto xf = x.to(torch::kFloat).reshape({-1, x.size(-1)}).contiguous();  // [R, K]
  auto x_steps = torch::full({xf.size(0), 1}, 127.0f);
  auto x_amax = xf.abs().amax(1, true);
  if (input_amax > 0) {
    x_amax.fill_(input_amax);
    if (input_signed) x_steps.fill_(63.0f);
  } else {
    x_steps.masked_fill_(xf.amin(1, true) < 0, 63.0f);
  }
  auto x_inverse = x_steps / torch::where(x_amax > 0, x_amax, x_steps);
  auto xq = torch::round(xf * x_inverse);
  xq = torch::maximum(torch::minimum(xq, x_steps), input_amax > 0 && !input_signed ? torch::zeros_like(x_steps) : -x_steps)
           .to(torch::kDouble);
  auto xs = torch::where(x_amax > 0, x_amax / x_steps, torch::ones_like(x_amax)).to(torch::kDouble);
  auto [wq_int8, w_inverse] = quantize_rows_int8(w);
  auto wq = wq_int8.to(torch::kDouble);
  auto ws = (1.0f / w_inverse).to(torch::kDouble).unsqueeze(1);  // [N, 1]
  auto y = xq.matmul(wq.t()) * xs * ws.t() + b.to(torch::kDouble);  // [R, N]
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  return y.reshape(shape).to(torch::kFloat);
}

TEST_P(Int8Linear, MatchesTheQuantizationFormulaForEveryShape) {
  torch::manual_seed(3);
  for (int64_t in : {256, 30}) {
    for (int64_t out : {16, 40, 1000}) {
      auto w = torch::randn({out, in}) * 0.1;
      w[1].zero_();  // an all-zero row
      auto b = torch::randn({out});
      for (int64_t rows : {1, 3, 8, 9, 70}) {
        auto x = torch::randn({rows, in});
        x[0].zero_();
        if (rows > 1) x[1].abs_();  // a row without negative values (a ReLU's output)
        auto q = quantize_linear_int8(w, b);
        auto y = int8_linear(x, *q);
        auto expected = reference_int8(x, w, b);
        ASSERT_EQ(y.sizes(), expected.sizes());
        EXPECT_TRUE(torch::allclose(y, expected, 1e-5, 1e-5))
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

// Every tile remainder, with products at their extremes (an int16 pair that saturated would be
// off by far more than the tolerance): equal to the portable loop bit for bit, so --dtype int8
// gives the same output on every CPU.
TEST_P(Int8Linear, EqualsThePortableLoopBitForBit) {
  torch::manual_seed(4);
  // Output counts that end on a whole 4-block panel and on 1, 2 and 3 blocks (1,000 = 15 panels
  // + 3 blocks, the last one partly padding); row counts that end on every row-tile remainder
  // (AMX: 16-row tiles, two at a time); inputs that are and are not a multiple of AVX2's
  // 32-input quantization step and of an AMX tile's 64.
  for (int64_t out : {1000, 16, 40, 80, 96, 128}) {
    for (int64_t in : {256, 30, 70, 12, 192}) {
      auto w = torch::randn({out, in}) * 0.05, b = torch::randn({out});
      w[0].fill_(0.05);   // a row of largest weights: every product at its extreme
      w[1].fill_(-0.05);  // and at the other
      auto q = quantize_linear_int8(w, b);
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 13, 20, 33, 64}) {
        SCOPED_TRACE(std::to_string(out) + "x" + std::to_string(in) + ", " + std::to_string(rows) + " rows");
        auto x = torch::randn({1, rows, in});  // [B, T, D]: leading dimensions are kept
        x[0][0].fill_(-1.f);                    // inputs at the negative extreme
        if (rows > 1) x[0][1].fill_(1.f);       // and at the positive
        auto fast = int8_linear(x, *q);
        auto alone = int8_linear(x[0][rows - 1], *q);
        at::Tensor portable;
        {
          CpuIsaOverride scalar(CpuIsa::kPortable);
          portable = int8_linear(x, *q);
        }
        EXPECT_EQ(fast.sizes(), torch::IntArrayRef({1, rows, out}));
        EXPECT_TRUE(torch::allclose(fast, reference_int8(x, w, b), 1e-5, 1e-5));
        EXPECT_TRUE(torch::equal(fast, portable)) << (fast - portable).abs().max().item<float>();
        EXPECT_TRUE(torch::equal(alone, fast[0][rows - 1]));
      }
    }
  }
}

// AVX2 adds two groups' vpmaddubsw sums in int16 where each lane's four |weights| sum to at most
// 258: at that bound, with every input at 127, a lane reaches 127 * 258 = 32,766 and the pair is
// exact; one step past it (259: 32,893 would wrap) the groups are not paired. Both signs.
TEST_P(Int8Linear, PairsGroupsOnlyWhereTheirInt16SumsCannotOverflow) {
  for (const int64_t second : {2, 3}) {
    for (const double sign : {1.0, -1.0}) {
      SCOPED_TRACE("second group's odd weights " + std::to_string(second) + ", sign " + std::to_string(sign));
      // 16 outputs (one block) x 8 inputs (two groups): group 0 at 127, group 1 at (2, second).
      auto row = torch::tensor({127.0, 127.0, 127.0, 127.0, 2.0, static_cast<double>(second), 2.0,
                                static_cast<double>(second)}) * sign / 127.0;
      auto w = row.to(torch::kFloat).unsqueeze(0).repeat({16, 1});  // [16, 8]
      auto b = torch::zeros({16});
      auto q = quantize_linear_int8(w, b);
      ASSERT_EQ(q->pair_count.size(), 1u);
      EXPECT_EQ(q->pair_count[0], second == 2 ? 1 : 0);
      auto x = torch::ones({3, 8});  // no negative value: 127 steps, every input at 127
      auto fast = int8_linear(x, *q);
      at::Tensor portable;
      {
        CpuIsaOverride scalar(CpuIsa::kPortable);
        portable = int8_linear(x, *q);
      }
      EXPECT_TRUE(torch::equal(fast, portable)) << (fast - portable).abs().max().item<float>();
      EXPECT_TRUE(torch::allclose(fast, reference_int8(x, w, b), 1e-5, 1e-5));
    }
  }
}

// A shortlist's output rows taken from the packed layer equal the layer quantized from those rows
// of the float weight: every field (pairs included: they depend on a block's rows), and its output.
TEST_P(Int8Linear, SelectedRowsAreThoseRowsQuantized) {
  torch::manual_seed(8);
  for (const int64_t in : {256, 30}) {
    auto w = torch::randn({70, in}) * 0.1, b = torch::randn({70});
    w[3].zero_();
    w[5] *= 0.01;  // small weights: this row's groups pair
    const auto whole = quantize_linear_int8(w, b, 2.5f, false);
    for (const std::vector<int64_t>& rows :
         {std::vector<int64_t>{5, 0, 69, 3, 5}, std::vector<int64_t>{17}, std::vector<int64_t>{}}) {
      SCOPED_TRACE(std::to_string(in) + " inputs, " + std::to_string(rows.size()) + " rows");
      const auto part = select_int8_rows(*whole, rows);
      const auto index = torch::tensor(rows, torch::kLong);
      const auto direct = quantize_linear_int8(w.index_select(0, index), b.index_select(0, index), 2.5f, false);
      EXPECT_EQ(part->in, direct->in);
      EXPECT_EQ(part->out, direct->out);
      EXPECT_EQ(part->in_padded, direct->in_padded);
      EXPECT_EQ(part->out_padded, direct->out_padded);
      EXPECT_EQ(part->packed, direct->packed);
      EXPECT_EQ(part->scale, direct->scale);
      EXPECT_EQ(part->row_sum, direct->row_sum);
      EXPECT_EQ(part->bias, direct->bias);
      EXPECT_EQ(part->group_order, direct->group_order);
      EXPECT_EQ(part->pair_count, direct->pair_count);
      EXPECT_EQ(part->input_amax, direct->input_amax);
      EXPECT_EQ(part->input_signed, direct->input_signed);
      if (rows.empty()) continue;
      auto x = torch::rand({9, in});
      EXPECT_TRUE(torch::equal(int8_linear(x, *part), int8_linear(x, *whole).index_select(1, index)));
    }
  }
  EXPECT_THROW(select_int8_rows(*quantize_linear_int8(torch::randn({4, 8}), at::Tensor()), {4}), c10::Error);
}

// Static int8 (export --calibrate): every row over the calibrated range, values beyond it clamped
// (signed: 63 steps a side; a range without negatives: 127 from zero, negatives to zero), equal
// to the formula and, bit for bit, to the portable loop.
TEST_P(Int8Linear, AStaticInputRangeQuantizesEveryRowOverIt) {
  torch::manual_seed(6);
  for (const bool signed_range : {true, false}) {
    for (int64_t in : {256, 30}) {
      auto w = torch::randn({40, in}) * 0.1, b = torch::randn({40});
      auto q = quantize_linear_int8(w, b, 1.5f, signed_range);
      for (int64_t rows : {1, 5, 13}) {
        SCOPED_TRACE(std::string(signed_range ? "signed" : "unsigned") + ", " + std::to_string(in) + " inputs, " +
                     std::to_string(rows) + " rows");
        auto x = torch::randn({rows, in});  // |x| beyond 1.5 in places: clamped
        x[0].fill_(4.f);
        x[rows - 1][0] = 1e12f;  // far past int32 once scaled: clamped before the conversion
        x[rows - 1][1] = -1e12f;
        if (!signed_range) x = x.abs();
        auto y = int8_linear(x, *q);
        EXPECT_TRUE(torch::allclose(y, reference_int8(x, w, b, 1.5f, signed_range), 1e-5, 1e-5));
        EXPECT_FALSE(torch::allclose(y, reference_int8(x, w, b), 1e-3, 1e-3));  // not each row's own range
        CpuIsaOverride scalar(CpuIsa::kPortable);
        EXPECT_TRUE(torch::equal(int8_linear(x, *q), y));
      }
    }
  }
}

TEST_P(Int8Linear, TheModelUsesItWithoutGradientsOnly) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 50;
  torch::manual_seed(5);
  Transformer model(c);
  model->eval();
  auto src = torch::randint(4, 50, {3, 7}), tgt = torch::randint(4, 50, {3, 5});
  auto float_logits = model->forward(src, tgt).detach();
  const int64_t linears = 4 * (c.num_encoder_layers + 2 * c.num_decoder_layers) + 2 * (c.num_encoder_layers + c.num_decoder_layers) + 1;
  EXPECT_EQ(prepare_linears_for_inference(*model, InferencePrecision::kInt8), linears);  // every Linear
  // Training (grad mode on) never sees the int8 copies.
  EXPECT_TRUE(torch::equal(model->forward(src, tgt).detach(), float_logits));
  torch::NoGradGuard no_grad;
  auto int8_logits = model->forward(src, tgt);
  release_inference_preparation(*model);
  auto float_inference = model->forward(src, tgt);  // fused inference passes, float linears
  EXPECT_TRUE(torch::allclose(float_inference, float_logits, 1e-5, 1e-5));
  prepare_linears_for_inference(*model, InferencePrecision::kInt8);
  EXPECT_FALSE(torch::equal(int8_logits, float_logits));
  EXPECT_LT((int8_logits - float_logits).norm().item<double>(), 0.05 * float_logits.norm().item<double>());
  prepare_linears_for_inference(*model, InferencePrecision::kFloat, &model->fc_out);  // packed: the same values
  EXPECT_TRUE(torch::allclose(model->forward(src, tgt), float_inference, 1e-5, 1e-5));
  release_inference_preparation(*model);
  EXPECT_TRUE(torch::equal(model->forward(src, tgt), float_inference));
}

// An int8 translator's layers keep no fp32 copy: the same outputs after the release, the weight's
// storage one element, the output projection kept, and a call outside int8 inference an error.
TEST(Int8LinearRelease, AnInt8OnlyModelTranslatesWithoutItsFloatWeights) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 50;
  torch::manual_seed(6);
  Transformer model(c);
  model->eval();
  auto src = torch::randint(4, 50, {3, 7}), tgt = torch::randint(4, 50, {3, 5});
  prepare_linears_for_inference(*model, InferencePrecision::kInt8);
  torch::Tensor before;
  {
    torch::NoGradGuard no_grad;
    before = model->forward(src, tgt);
  }
  const auto fc_bytes = model->fc_out->weight.storage().nbytes();
  const int64_t freed = release_float_weights(*model, &model->fc_out);
  int64_t expected = 0;
  for (const auto& p : model->named_parameters()) {
    if (p.value().dim() == 2 && p.key().find("embedding") == std::string::npos && p.key() != "fc_out.weight") {
      expected += static_cast<int64_t>(p.value().numel() * 4);  // shapes are kept
    }
  }
  EXPECT_EQ(freed, expected);
  EXPECT_GT(freed, 0);
  for (const auto& p : model->named_parameters()) {
    if (p.value().dim() == 2 && p.key().find("embedding") == std::string::npos && p.key() != "fc_out.weight") {
      EXPECT_EQ(p.value().storage().nbytes(), 4u) << p.key();
    }
  }
  EXPECT_EQ(model->fc_out->weight.storage().nbytes(), fc_bytes);
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(model->forward(src, tgt), before));
  }
  EXPECT_THROW(model->forward(src, tgt), std::logic_error);  // gradients on: no int8
  // Released as each layer is quantized (load_translator): the same model.
  torch::manual_seed(6);
  Transformer again(c);
  again->eval();
  prepare_linears_for_inference(*again, InferencePrecision::kInt8, nullptr, &again->fc_out);
  EXPECT_EQ(release_float_weights(*again, &again->fc_out), 0);  // nothing left to release
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(again->forward(src, tgt), before));
}

// int8 quantizes what ATen's float kernels return, whose AVX2 and AVX-512 copies round
// differently: the kernel layer keeps ATen at avx2 wherever AVX2 runs, set before ATen's first
// kernel (this process's too). Assumes whoever runs the tests did not set ATEN_CPU_CAPABILITY.
TEST(Int8LinearLevels, AtenRunsOneLevelWhereverAvx2Runs) {
  const bool avx2 = kernels::cpu_isa() >= kernels::CpuIsa::kAvx2;
  const char* set = std::getenv("ATEN_CPU_CAPABILITY");
  ASSERT_NE(set, nullptr);
  EXPECT_STREQ(set, avx2 ? "avx2" : "default");
#if defined(__x86_64__)
  EXPECT_EQ(at::get_cpu_capability(), avx2 ? "AVX2" : "DEFAULT");  // what ATen dispatches to
#endif
}

}  // namespace
}  // namespace torchmt
