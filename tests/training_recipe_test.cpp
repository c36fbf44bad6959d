// The paper's recipe pieces: label-smoothed cross-entropy and the learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include "training/adam_optimizer.h"
#include "training/inverse_sqrt_schedule.h"
#include "training/label_smoothed_cross_entropy.h"
#include "training/training_step.h"

#include "kernel_isa_support.h"
#include "kernels/primitives.h"

namespace torchmt {
namespace {

// The CPU kernels on every instruction set this machine runs.
class LabelSmoothedCrossEntropyKernel : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(LabelSmoothedCrossEntropyKernel);

// Two target positions over a vocabulary of three, computed by hand:
//  row 0: uniform p = (1/3, 1/3, 1/3), gold 1: nll = ln 3, sum(-log p) = 3 ln 3
//  row 1: p = (0.2, 0.3, 0.5), gold 2:     nll = ln 2, sum(-log p) = ln 5 + ln(10/3) + ln 2
//  loss = sum over rows of 0.9 * nll + 0.1 / 3 * sum(-log p) = 1.098612 + 0.740717 = 1.839329
TEST(LabelSmoothedCrossEntropy, MatchesHandComputationOn2x3) {
  auto logits = torch::stack({torch::zeros({3}), torch::log(torch::tensor({0.2, 0.3, 0.5}, torch::kFloat))})
                    .unsqueeze(0);                       // [1, 2, 3]
  auto target = torch::tensor({{1, 2}}, torch::kLong);  // [1, 2]
  LabelSmoothedCrossEntropy criterion(0.1, /*pad_id=*/0);
  auto out = criterion(logits, target);
  EXPECT_NEAR(out.loss.item<double>(), 1.839329, 1e-5);
  EXPECT_NEAR(out.nll.item<double>(), std::log(3.0) + std::log(2.0), 1e-5);
  EXPECT_EQ(out.tokens.item<int64_t>(), 2);
}

TEST(LabelSmoothedCrossEntropy, IgnoresPaddingAndReducesToCrossEntropyWithoutSmoothing) {
  auto logits = torch::randn({2, 4, 7});
  auto target = torch::tensor({{3, 4, 5, 0}, {6, 0, 0, 0}}, torch::kLong);
  auto out = LabelSmoothedCrossEntropy(0.0, 0)(logits, target);
  auto expected = torch::nn::functional::cross_entropy(
      logits.view({-1, 7}), target.view({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(0).reduction(torch::kSum));
  EXPECT_NEAR(out.loss.item<double>(), expected.item<double>(), 1e-4);
  EXPECT_EQ(out.tokens.item<int64_t>(), 4);
  // With smoothing, PyTorch's own label_smoothing option agrees (it spreads eps over V too).
  auto smoothed = LabelSmoothedCrossEntropy(0.1, 0)(logits, target);
  auto torch_smoothed = torch::nn::functional::cross_entropy(
      logits.view({-1, 7}), target.view({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(0).reduction(torch::kSum).label_smoothing(0.1));
  EXPECT_NEAR(smoothed.loss.item<double>(), torch_smoothed.item<double>(), 1e-4);
}

// The CPU criterion is a fused kernel; the same formula in ATen ops is the reference, for
// the loss, the nll and the gradient, with padding, in fp32 and bf16, for vocabularies
// with and without a tail beyond the vector width.
TEST_P(LabelSmoothedCrossEntropyKernel, FusedCpuKernelMatchesAtenFormulaAndAutograd) {
  for (int64_t vocab : {5, 16, 37, 8000}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      torch::manual_seed(vocab);
      auto logits = (3 * torch::randn({3, 6, vocab})).to(dtype).requires_grad_(true);
      auto target = torch::randint(1, vocab, {3, 6}, torch::kLong);
      target.index_put_({1, torch::indexing::Slice(3)}, 0);  // padding
      auto out = LabelSmoothedCrossEntropy(0.1, 0)(logits, target);
      out.loss.backward();

      auto reference_logits = logits.detach().to(torch::kFloat).requires_grad_(true);
      auto lprobs = torch::log_softmax(reference_logits, -1).view({-1, vocab});
      auto flat = target.view({-1, 1});
      auto keep = flat.ne(0);
      auto nll = -lprobs.gather(1, flat).masked_fill(keep.logical_not(), 0).sum();
      auto smooth = -lprobs.sum(-1, true).masked_fill(keep.logical_not(), 0).sum();
      auto loss = 0.9 * nll + 0.1 / static_cast<double>(vocab) * smooth;
      loss.backward();

      const std::string where = "vocab " + std::to_string(vocab) + (dtype == torch::kFloat ? " fp32" : " bf16");
      EXPECT_NEAR(out.loss.item<double>(), loss.item<double>(), 1e-5 * loss.item<double>()) << where;
      EXPECT_NEAR(out.nll.item<double>(), nll.item<double>(), 1e-5 * nll.item<double>()) << where;
      EXPECT_EQ(out.tokens.item<int64_t>(), keep.sum().item<int64_t>()) << where;
      ASSERT_EQ(logits.grad().scalar_type(), dtype) << where;
      // fp32: both sum 8000 exponentials in float, in different orders (ours: 16 lanes of 500
      // sequential adds, a relative error up to ~500 * 2^-24 = 3e-5; an AVX2 machine, whose copy
      // of the kernel has no FMA, was 1.6e-5 off ATen on a probability of 0.31); bf16: one
      // rounding of the gradient.
      const double tolerance = dtype == torch::kFloat ? 3e-5 : 4e-3;
      EXPECT_TRUE(torch::allclose(logits.grad().to(torch::kFloat), reference_logits.grad(), tolerance, 1e-6))
          << where << ": max difference "
          << (logits.grad().to(torch::kFloat) - reference_logits.grad()).abs().max().item<double>();
      EXPECT_EQ(logits.grad()[1].slice(0, 3).abs().sum().item<double>(), 0.0) << where;  // pad rows
    }
  }
}

TEST(LabelSmoothedCrossEntropy, TargetOutsideTheVocabularyIsAnError) {
  auto logits = torch::randn({1, 2, 10});
  EXPECT_THROW(LabelSmoothedCrossEntropy(0.1, 0)(logits, torch::tensor({{3, 10}}, torch::kLong)), c10::Error);
  EXPECT_THROW(LabelSmoothedCrossEntropy(0.1, 0)(logits, torch::tensor({{-1, 3}}, torch::kLong)), c10::Error);
}

TEST_P(LabelSmoothedCrossEntropyKernel, WithoutGradientModeComputesTheSameLoss) {
  auto logits = torch::randn({2, 5, 40});
  auto target = torch::randint(1, 40, {2, 5}, torch::kLong);
  auto with_grad = LabelSmoothedCrossEntropy(0.1, 0)(logits.clone().requires_grad_(true), target);
  torch::NoGradGuard no_grad;
  auto without = LabelSmoothedCrossEntropy(0.1, 0)(logits, target);
  EXPECT_FALSE(without.loss.requires_grad());
  EXPECT_DOUBLE_EQ(with_grad.loss.item<double>(), without.loss.item<double>());
}

TEST(InverseSqrtSchedule, FollowsThePaperFormula) {
  InverseSqrtSchedule schedule(2.0, 512, 4000);
  auto formula = [](double step) { return 2.0 / std::sqrt(512.0) * std::min(1 / std::sqrt(step), step / std::pow(4000.0, 1.5)); };
  for (int64_t step : {1, 10, 100, 3999, 4000, 4001, 10000, 100000})
    EXPECT_NEAR(schedule.lr(step), formula(static_cast<double>(step)), 1e-12) << "step " << step;
  EXPECT_NEAR(schedule.lr(4000), 0.00139754, 1e-8);  // the peak: 2 / sqrt(512 * 4000)
  EXPECT_LT(schedule.lr(1000), schedule.lr(4000));
  EXPECT_LT(schedule.lr(16000), schedule.lr(4000));
  EXPECT_NEAR(schedule.lr(16000), schedule.lr(4000) / 2, 1e-12);
  EXPECT_THROW(InverseSqrtSchedule(1.0, 512, 0), std::invalid_argument);
}

TEST(AdamOptimizer, MatchesTorchAdamUpdates) {
  torch::manual_seed(5);
  auto a = torch::randn({4, 3}, torch::requires_grad());
  auto b = a.detach().clone().requires_grad_(true);
  AdamOptimizer ours({a}, AdamOptions{});
  torch::optim::Adam reference({b}, torch::optim::AdamOptions(1e-3).betas({0.9, 0.98}).eps(1e-9));
  for (int step = 0; step < 5; ++step) {
    auto g = torch::randn({4, 3});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    ours.step(1e-3);
    reference.step();
  }
  EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-6));
  EXPECT_EQ(ours.steps()[0].item<float>(), 5.0f);
}

// The factor training scales the gradients by (per token, clipped), applied inside the step.
TEST(AdamOptimizer, AGradientFactorIsTheUpdateOfTheScaledGradients) {
  torch::manual_seed(6);
  auto a = torch::randn({40, 3}, torch::requires_grad());
  auto b = a.detach().clone().requires_grad_(true);
  AdamOptimizer ours({a}, AdamOptions{});
  torch::optim::Adam reference({b}, torch::optim::AdamOptions(1e-3).betas({0.9, 0.98}).eps(1e-9));
  for (int step = 0; step < 5; ++step) {
    auto g = torch::randn({40, 3});
    const auto factor = torch::full({}, 0.01 * (step + 1));
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g * factor;
    ours.step(1e-3, torch::zeros({}), factor);
    reference.step();
  }
  EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-6));
}

// zero_grad drops the gradients as torch.optim's zero_grad(set_to_none) does: the next backward's
// gradient becomes .grad unchanged, and a parameter it does not reach keeps its weights and state.
TEST(AdamOptimizer, ZeroGradDropsTheGradientsAsTorchOptimSetToNone) {
  torch::manual_seed(8);
  auto a = torch::randn({5, 3}, torch::requires_grad());
  auto unused_later = torch::randn({3}, torch::requires_grad());
  auto ra = a.detach().clone().requires_grad_(true);
  auto ru = unused_later.detach().clone().requires_grad_(true);
  AdamOptimizer ours({a, unused_later}, AdamOptions{});
  torch::optim::Adam reference({ra, ru}, torch::optim::AdamOptions(1e-3).betas({0.9, 0.98}).eps(1e-9));
  for (int step = 0; step < 4; ++step) {
    const auto x = torch::randn({3});
    // Both parameters in the first update, only `a` afterwards.
    auto loss = [&](const at::Tensor& w, const at::Tensor& u) {
      auto y = torch::mv(w, x).pow(2).sum();
      return step == 0 ? y + (u * x).sum() : y;
    };
    loss(a, unused_later).backward();
    loss(ra, ru).backward();
    ours.step(1e-3);
    reference.step();
    ours.zero_grad();
    reference.zero_grad(/*set_to_none=*/true);
    EXPECT_FALSE(a.grad().defined());
    EXPECT_FALSE(unused_later.grad().defined());
  }
  EXPECT_TRUE(torch::allclose(a, ra, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(unused_later, ru, 1e-6, 1e-6));
  EXPECT_EQ(ours.steps()[1].item<float>(), 1.0f);  // stepped in the first update only
  EXPECT_EQ(ours.steps()[0].item<float>(), 4.0f);
}

TEST(TrainingStep, TheGradientsSumOfSquaresIsTheirNormSquaredOnAnyThreadCount) {
  torch::manual_seed(7);
  // Chunks of 16,384: a tensor of several, tensors under one vector, a tail.
  std::vector<at::Tensor> tensors = {torch::randn({70000}), torch::randn({5}), torch::randn({300, 257}),
                                     torch::randn({})};
  const double expected = at::linalg_vector_norm(at::stack(at::_foreach_norm(tensors, 2)), 2).item<double>();
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  const auto one = kernels::sum_of_squares(tensors);
  torch::set_num_threads(2);
  const auto two = kernels::sum_of_squares(tensors);
  torch::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one, two));
  EXPECT_NEAR(std::sqrt(one.item<double>()), expected, 1e-5 * expected);
  EXPECT_FALSE(kernels::sum_of_squares_applies({torch::randn({4, 3}).t()}));  // not contiguous
  EXPECT_FALSE(kernels::sum_of_squares_applies({torch::randn({4}, torch::kDouble)}));
}

// ffn: moe: the load-balancing loss trains the gates (and, through their inputs, what lies
// before them), never what lies after the last layer (fc_out: no clipping here, and Adam's
// update of a parameter depends on its own gradient alone); the reported loss is the
// translation loss without it.
TEST(TrainingStep, MoeAuxLossTrainsTheGateAndIsNotReported) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 30;
  c.ffn = Ffn::kMoe;
  c.experts = 4;
  c.top_k = 2;
  Batch batch;
  batch.src = torch::tensor({5, 6, 7, 8, 3, 9, 10, 11, 12, 3}, torch::kLong).view({2, 5});
  batch.tgt_in = torch::tensor({2, 13, 14, 15, 2, 16, 17, 18}, torch::kLong).view({2, 4});
  batch.tgt_out = torch::tensor({13, 14, 15, 3, 16, 17, 18, 3}, torch::kLong).view({2, 4});
  batch.src_tokens = 10;
  batch.tgt_tokens = 8;
  auto train = [&](double coefficient, double* loss) {
    torch::manual_seed(3);
    Transformer model(c);
    AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
    TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(0.1, 0), torch::kCPU, torch::kFloat, 0.0);
    step.set_moe_aux_loss(coefficient);
    StepResult r = step.run({batch}, 1e-2);
    r.wait();
    *loss = r.loss;
    return model;
  };
  double loss_without = 0, loss_with = 0;
  Transformer without = train(0.0, &loss_without), with = train(1.0, &loss_with);
  EXPECT_DOUBLE_EQ(loss_with, loss_without);
  auto theirs = without->named_parameters();
  int64_t gates = 0;
  for (const auto& p : with->named_parameters()) {
    const bool gate = p.key().find(".ffn.gate.") != std::string::npos;
    gates += gate;
    if (gate) {
      EXPECT_FALSE(torch::equal(p.value(), theirs[p.key()])) << p.key();
    }
    if (p.key().rfind("fc_out.", 0) == 0) {
      EXPECT_TRUE(torch::equal(p.value(), theirs[p.key()])) << p.key();
    }
  }
  EXPECT_EQ(gates, 2 * (c.num_encoder_layers + c.num_decoder_layers));  // weight and bias per layer
}

// R-Drop's term against PyTorch's own kl_div both ways, padding ignored.
TEST(RDrop, SymmetricKlIsKlDivBothWaysOverTheNonPadPositions) {
  torch::manual_seed(5);
  auto logits = torch::randn({4, 3, 7}, torch::requires_grad());  // [2B, T, V], B = 2
  auto target = torch::tensor({{3, 4, 0}, {6, 0, 0}}, torch::kLong);
  auto kl = rdrop_symmetric_kl(logits, target, /*pad_id=*/0);
  auto lp = torch::log_softmax(logits, -1).chunk(2, 0);
  namespace F = torch::nn::functional;
  auto none = F::KLDivFuncOptions().reduction(torch::kNone).log_target(true);
  auto both = (F::kl_div(lp[1], lp[0], none) + F::kl_div(lp[0], lp[1], none)).sum(-1);  // [B, T]
  auto expected = both.masked_fill(target.eq(0), 0.0).sum();
  EXPECT_NEAR(kl.item<double>(), expected.item<double>(), 1e-5);
  EXPECT_GT(kl.item<double>(), 0.0);
  // Gradients reach both copies.
  kl.backward();
  EXPECT_GT(logits.grad().slice(0, 0, 2).abs().sum().item<double>(), 0.0);
  EXPECT_GT(logits.grad().slice(0, 2, 4).abs().sum().item<double>(), 0.0);
  EXPECT_THROW(rdrop_symmetric_kl(torch::randn({3, 3, 7}), target, 0), c10::Error);
}

Batch rdrop_batch() {
  Batch batch;
  batch.src = torch::tensor({5, 6, 7, 8, 3, 9, 10, 11, 12, 3}, torch::kLong).view({2, 5});
  batch.tgt_in = torch::tensor({2, 13, 14, 15, 2, 16, 17, 18}, torch::kLong).view({2, 4});
  batch.tgt_out = torch::tensor({13, 14, 15, 3, 16, 0, 0, 0}, torch::kLong).view({2, 4});  // padding in row 1
  batch.src_tokens = 10;
  batch.tgt_tokens = 5;
  return batch;
}

// One update of a tiny model with R-Drop at `alpha` (0: off): its result and the model after it.
StepResult rdrop_update(double dropout, double alpha, Transformer* trained = nullptr) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 30;
  c.dropout = dropout;
  torch::manual_seed(3);
  Transformer model(c);
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(0.1, 0), torch::kCPU, torch::kFloat, 1.0);
  step.set_rdrop(alpha);
  StepResult r = step.run({rdrop_batch()}, 1e-2);
  r.wait();
  EXPECT_EQ(r.tokens, 5);  // one copy's target tokens
  if (trained != nullptr) *trained = model;
  return r;
}

// Without dropout the two copies agree, the KL term is zero, and an R-Drop update has the
// plain update's loss and gradient (norm before clipping, per target token); with dropout the
// KL term trains (the gradient differs from the same two copies' without it) and is not part
// of the reported loss.
TEST(TrainingStep, RDropIsThePlainUpdateWithoutDropoutAndTrainsItsKlTermWithDropout) {
  const StepResult plain = rdrop_update(0.0, 0.0), rdrop = rdrop_update(0.0, 5.0);
  EXPECT_NEAR(rdrop.loss, plain.loss, 1e-5 * plain.loss);
  EXPECT_NEAR(rdrop.grad_norm, plain.grad_norm, 1e-4 * plain.grad_norm);

  Transformer strong_model(nullptr);
  const StepResult weak = rdrop_update(0.3, 1e-9), strong = rdrop_update(0.3, 50.0, &strong_model);
  EXPECT_DOUBLE_EQ(strong.loss, weak.loss);  // the same dropout masks, the KL not reported
  EXPECT_GT(std::abs(strong.grad_norm - weak.grad_norm), 1e-3 * weak.grad_norm);
  EXPECT_TRUE(strong.applied);
  for (const auto& p : strong_model->parameters()) EXPECT_TRUE(p.isfinite().all().item<bool>());
}

// Training over the open output columns only is the whole layer's update when the others are
// closed (their probability is zero there): the same loss, gradient norm and gradients (Adam's
// first moments after one update; the weights themselves differ by Adam's sign of gradients
// that are zero but for rounding, e.g. the keys' biases), and the closed columns stay closed.
TEST(TrainingStep, OpenColumnsOnlyEqualTheWholeLayerWithTheOthersClosed) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelConfig c = ModelConfig::preset("tiny");
    c.src_vocab_size = c.tgt_vocab_size = 30;
    c.dropout = 0.0;
    c.tie_embeddings = tied;
    // The batch's targets and specials open, and a few columns no target holds.
    at::Tensor open = torch::zeros({30}, torch::kBool);
    for (int64_t id : {0, 1, 2, 3, 13, 14, 15, 16, 20, 27}) open[id] = true;
    std::vector<Transformer> models;
    std::vector<std::unique_ptr<AdamOptimizer>> optimizers;
    std::vector<StepResult> results;
    for (bool columns_only : {false, true}) {
      torch::manual_seed(3);
      Transformer model(c);
      model->close_output_columns(open);
      optimizers.push_back(std::make_unique<AdamOptimizer>(unique_parameters(*model), AdamOptions{}));
      TrainingStep step(model, *optimizers.back(), LabelSmoothedCrossEntropy(0.0, 0), torch::kCPU, torch::kFloat, 1.0);
      if (columns_only) {  // set twice, as a caller may: the second call alone counts
        step.set_output_columns(model->open_output_columns());
        step.set_output_columns(model->open_output_columns());
      }
      results.push_back(step.run({rdrop_batch()}, 1e-2));
      results.back().wait();
      models.push_back(model);
    }
    EXPECT_NEAR(results[1].loss, results[0].loss, 1e-5 * results[0].loss);
    EXPECT_NEAR(results[1].grad_norm, results[0].grad_norm, 1e-4 * results[0].grad_norm);
    const auto &whole = optimizers[0]->exp_avg(), &part = optimizers[1]->exp_avg();
    ASSERT_EQ(whole.size(), part.size());
    for (size_t i = 0; i < whole.size(); ++i) EXPECT_TRUE(torch::allclose(part[i], whole[i], 1e-4, 1e-8)) << "parameter " << i;
    EXPECT_TRUE(torch::equal(models[1]->open_output_columns(), open));
  }
}

}  // namespace
}  // namespace torchmt
