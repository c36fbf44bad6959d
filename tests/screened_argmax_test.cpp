// Greedy decoding's screened projection (src/kernels/primitives.h), on every instruction set:
// every row it decides gets the token of the full fp32 projection's log-softmax top-1, near-ties
// go back to the full row, a weight changed after preparation is not screened with the old copy;
// and a greedy search without scores finds the same tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "kernel_isa_support.h"
#include "kernels/primitives.h"
#include "torchmt/decoding/search.h"
#include "decoding/transformer_decoder.h"
#include "model/linear.h"

namespace torchmt {
namespace {

using namespace kernels;

class ScreenedArgmax : public test::EveryCpuIsa {};
TORCHMT_FOR_EVERY_CPU_ISA(ScreenedArgmax);

// What greedy search takes without the screen: the top-1 of the log-softmax of the logits, from
// the few-row kernel up to kSmallBatchLinearMaxRows rows, else from `gemm` (ATen's GEMM by default).
std::vector<int64_t> full_top1(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                               PackedGemm gemm = PackedGemm::kAten) {
  auto logits = try_small_batch_linear_cpu(x, w, b);
  if (!logits.defined())
    logits = gemm == PackedGemm::kAten ? torch::linear(x, w, b) : try_packed_linear(pack_weight(w, gemm), x, b);
  EXPECT_TRUE(logits.defined());
  EXPECT_TRUE(try_log_softmax_in_place_cpu(logits));
  auto top = row_top_k(logits, 1).second.contiguous();
  return std::vector<int64_t>(top.data_ptr<int64_t>(), top.data_ptr<int64_t>() + top.numel());
}

bool int8_screen_runs() { return cpu_isa() != CpuIsa::kPortable; }

TEST_P(ScreenedArgmax, DecidedRowsGetTheFullProjectionsTokenFromFewFp32Logits) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  // Widths off the kernels' vector and block sizes; logits spread like a trained projection's.
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{256, 3000}, {200, 1001}, {37, 500}}) {
    auto w = torch::randn({out, in}) * 0.05;
    for (bool with_bias : {true, false}) {
      auto b = with_bias ? torch::randn({out}) * 0.1 : torch::Tensor();
      const auto screen = build_screen(w, b);
      int64_t decided = 0, total = 0;
      // Few rows (the few-row kernel's) and a batch's (a GEMM's, whose summation order is not ours).
      for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 64}) {
        auto x = torch::randn({rows, in}) * 2.0;
        const auto before = screen_stats();
        const auto tokens = try_screened_argmax(*screen, x, w, b);
        const auto after = screen_stats();
        EXPECT_EQ(after.rows - before.rows, rows);
        EXPECT_EQ(after.open_rows - before.open_rows, std::count(tokens.begin(), tokens.end(), -1));
        ASSERT_EQ(static_cast<int64_t>(tokens.size()), rows);
        std::vector<PackedGemm> gemms{PackedGemm::kAten};
        if (rows > kSmallBatchLinearMaxRows)
          for (auto g : available_packed_gemms()) gemms.push_back(g);
        for (auto gemm : gemms) {
          const auto expected = full_top1(x, w, b, gemm);
          for (int64_t m = 0; m < rows; ++m) {
            if (tokens[m] < 0) continue;
            EXPECT_EQ(tokens[m], expected[m]) << in << "x" << out << " row " << m << " of " << rows << ", "
                                              << packed_gemm_name(gemm);
          }
        }
        for (int64_t m = 0; m < rows; ++m) {
          ++total;
          decided += tokens[m] >= 0 ? 1 : 0;
        }
        if (rows == 1 && tokens[0] >= 0) {
          EXPECT_LT(after.fp32_logits - before.fp32_logits, out / 4) << "the screen ruled out too few rows";
        }
      }
      EXPECT_GT(decided, total / 2) << in << "x" << out << ": the screen decided " << decided << " of " << total;
    }
  }
}

TEST_P(ScreenedArgmax, ATieOrNearTieIsLeftToTheFullRow) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const int64_t in = 64, out = 300;
  auto w = torch::randn({out, in}) * 0.05;
  auto x = torch::randn({1, in});
  // Rows 7 and 123 point along x: far above the others, and equal (a tie) or 1e-6 apart.
  w[7] = x[0] / x.norm() * 3.0;
  w[123] = w[7].clone();
  auto screened = [&] { return try_screened_argmax(*build_screen(w, {}), x, w, torch::Tensor()); };
  EXPECT_EQ(screened(), std::vector<int64_t>{-1});
  w[123] *= 1.0 + 1e-6;
  EXPECT_EQ(screened(), std::vector<int64_t>{-1});
  // Apart by more than the margin, the screen decides, as the full row does.
  w[123] *= 1.01;
  EXPECT_EQ(screened(), std::vector<int64_t>{123});
  EXPECT_EQ(full_top1(x, w, torch::Tensor()), std::vector<int64_t>{123});
}

// A shortlist's rows: the outputs a row may not produce (blocked) are never its token, and the
// token is the full projection's top-1 among the others; a row with every output blocked is left
// to the full row.
TEST_P(ScreenedArgmax, BlockedOutputsAreNeverTheToken) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  const int64_t in = 96, out = 700, rows = 20;
  auto w = torch::randn({out, in}) * 0.05, b = torch::randn({out}) * 0.1, x = torch::randn({rows, in}) * 2.0;
  const auto screen = build_screen(w, b);
  const auto unblocked = full_top1(x, w, b);
  auto blocked = torch::rand({rows, out}) < 0.7;  // [N, V]
  for (int64_t m = 0; m < rows; ++m) blocked[m][unblocked[static_cast<size_t>(m)]] = true;  // the best: blocked
  blocked[3].fill_(true);
  const auto tokens = try_screened_argmax(*screen, x, w, b, blocked);
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), rows);
  auto masked = torch::linear(x, w, b).masked_fill_(blocked, -std::numeric_limits<float>::infinity());
  const auto expected = row_top_k(masked, 1).second.contiguous();
  int64_t decided = 0;
  for (int64_t m = 0; m < rows; ++m) {
    if (tokens[m] < 0) continue;
    ++decided;
    EXPECT_FALSE(blocked[m][tokens[m]].item<bool>()) << "row " << m;
    EXPECT_EQ(tokens[m], expected.data_ptr<int64_t>()[m]) << "row " << m;
  }
  EXPECT_EQ(tokens[3], -1) << "nothing left to produce";
  EXPECT_GT(decided, rows / 2);
  EXPECT_TRUE(try_screened_argmax(*screen, x, w, b, blocked.narrow(0, 0, rows - 1)).empty()) << "a mask of other rows";
}

// A shortlist's columns screened from the whole projection's screen: the same tokens, the same
// fp32 logits computed and the same beam step as a screen built from those rows of the weight.
TEST_P(ScreenedArgmax, SelectedRowsScreenAsAScreenOfThoseRows) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(13);
  const int64_t in = 96, out = 700, rows = 24;
  auto w = torch::randn({out, in}) * 0.05, b = torch::randn({out}) * 0.1, x = torch::randn({rows, in}) * 2.0;
  std::vector<int64_t> columns;
  for (int64_t v = 3; v < out; v += 3) columns.push_back(v);
  const auto index = torch::tensor(columns, torch::kLong);
  const auto part_w = w.index_select(0, index), part_b = b.index_select(0, index);
  const auto selected = select_screen_rows(*build_screen(w, b), columns, part_w, part_b);
  const auto built = build_screen(part_w, part_b);
  auto run = [&](const ScreenedProjection& screen) {
    const auto before = screen_stats();
    auto tokens = try_screened_argmax(screen, x, part_w, part_b);
    at::Tensor values, indices, extra;
    std::vector<int64_t> open;
    EXPECT_TRUE(try_screened_log_softmax_top_k(screen, x, part_w, part_b, 4, {0, 7}, &values, &indices, &extra, &open));
    return std::make_tuple(tokens, screen_stats().fp32_logits - before.fp32_logits, values, indices, extra, open);
  };
  const auto [tokens, logits, values, indices, extra, open] = run(*selected);
  const auto [tokens_b, logits_b, values_b, indices_b, extra_b, open_b] = run(*built);
  EXPECT_EQ(tokens, tokens_b);
  EXPECT_GT(std::count_if(tokens.begin(), tokens.end(), [](int64_t t) { return t >= 0; }), rows / 2);
  EXPECT_EQ(logits, logits_b);
  EXPECT_TRUE(torch::equal(values, values_b));
  EXPECT_TRUE(torch::equal(indices, indices_b));
  EXPECT_TRUE(torch::equal(extra, extra_b));
  EXPECT_EQ(open, open_b);
  EXPECT_THROW(select_screen_rows(*build_screen(w, b), columns, w, b), c10::Error) << "not the selected rows' weight";
}

// The screen is made when the layer is prepared; a weight changed in place after that (an
// optimizer step) is not screened with the old copy, until it is prepared again.
TEST_P(ScreenedArgmax, AWeightChangedAfterPreparationIsNotScreenedWithTheOldCopy) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  torch::nn::Linear layer = make_linear(48, 400);
  layer->weight.normal_(0, 0.05);
  layer->bias.zero_();
  auto x = torch::randn({1, 48});
  layer->weight[17] = x[0] / x.norm();
  EXPECT_TRUE(try_linear_argmax(layer, x).empty()) << "not prepared: no screen";
  prepare_linears_for_inference(*layer, InferencePrecision::kFloat, &layer);
  EXPECT_EQ(try_linear_argmax(layer, x), std::vector<int64_t>{17});
  layer->weight[250] = x[0] / x.norm() * 2.0;  // the same storage, a new version
  EXPECT_TRUE(try_linear_argmax(layer, x).empty());
  prepare_linears_for_inference(*layer, InferencePrecision::kFloat, &layer);
  EXPECT_EQ(try_linear_argmax(layer, x), std::vector<int64_t>{250});
  layer->bias[3] = 1000.0f;  // the bias too
  EXPECT_TRUE(try_linear_argmax(layer, x).empty());
  prepare_linears_for_inference(*layer, InferencePrecision::kFloat, &layer);
  EXPECT_EQ(try_linear_argmax(layer, x), std::vector<int64_t>{3});
  release_inference_preparation(*layer);
  EXPECT_TRUE(try_linear_argmax(layer, x).empty());
}

TEST_P(ScreenedArgmax, StepsAsideWhereTheFullPathIsAnotherKernel) {
  torch::manual_seed(7);
  auto w = torch::randn({100, 32}), x = torch::randn({9, 32});
  const auto screen = build_screen(w, {});
  {
    torch::NoGradGuard no_grad;
    EXPECT_EQ(try_screened_argmax(*screen, x, w, {}).size(), int8_screen_runs() ? 9u : 0u)
        << "more rows than the few-row kernel takes: screened all the same";
    EXPECT_TRUE(try_screened_argmax(*screen, x.slice(0, 0, 2).to(torch::kBFloat16), w, {}).empty());
    EXPECT_TRUE(try_screened_argmax(*screen, x.slice(0, 0, 2), w.narrow(0, 0, 99), {}).empty()) << "another weight";
    auto nan_row = x.slice(0, 0, 1).clone();
    nan_row[0][3] = std::nan("");
    if (int8_screen_runs()) {
      EXPECT_EQ(try_screened_argmax(*screen, nan_row, w, {}), std::vector<int64_t>{-1});
    }
  }
  EXPECT_TRUE(try_screened_argmax(*screen, x.slice(0, 0, 2), w, {}).empty()) << "gradients on";
}

// Beam search's step: every row the screen decides gets the full log-softmax's best `width`
// columns in its order, their log-probabilities and the extra columns' to within the normaliser's
// int8 tail (a few 1e-3 at most here; ~2e-4 on trained models), from few fp32 logits where the
// logits spread; flat rows (most of the mass in the int8 tail) still come out right.
TEST_P(ScreenedArgmax, BeamStepGetsTheFullRowsBestColumnsAndTheirLogProbabilities) {
  if (!int8_screen_runs()) GTEST_SKIP() << "the screen needs an int8 kernel other than the portable loop";
  torch::NoGradGuard no_grad;
  torch::manual_seed(21);
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{256, 3000}, {200, 1001}, {37, 500}}) {
    auto w = torch::randn({out, in}) * 0.05;
    for (bool with_bias : {true, false}) {
      auto b = with_bias ? torch::randn({out}) * 0.1 : torch::Tensor();
      const auto screen = build_screen(w, b);
      for (double spread : {8.0, 1.0}) {
        for (int64_t rows : {1, 5, 40}) {
          for (int64_t width : {1, 10}) {
            auto x = torch::randn({rows, in}) * spread;
            const std::vector<int64_t> extra{2, out - 1};
            at::Tensor values, indices, extra_values;
            std::vector<int64_t> open;
            const auto before = screen_stats();
            ASSERT_TRUE(try_screened_log_softmax_top_k(*screen, x, w, b, width, extra, &values, &indices,
                                                       &extra_values, &open));
            const auto after = screen_stats();
            EXPECT_EQ(after.rows - before.rows, rows);
            EXPECT_EQ(after.open_rows - before.open_rows, static_cast<int64_t>(open.size()));
            auto full = torch::log_softmax(torch::linear(x, w, b), -1);  // [N, V]
            const auto [full_values, full_indices] = row_top_k(full, width);
            for (int64_t m = 0; m < rows; ++m) {
              if (std::find(open.begin(), open.end(), m) != open.end()) continue;
              const std::string where = std::to_string(in) + "x" + std::to_string(out) + " spread " +
                                        std::to_string(spread) + " row " + std::to_string(m);
              EXPECT_TRUE(torch::equal(indices[m], full_indices[m])) << where;
              EXPECT_LT((values[m] - full_values[m]).abs().max().item<float>(), 5e-3) << where;
              for (size_t e = 0; e < extra.size(); ++e)
                EXPECT_NEAR(extra_values[m][static_cast<int64_t>(e)].item<float>(),
                            full[m][extra[e]].item<float>(), 5e-3) << where;
            }
            if (spread > 2 && in >= 200) {  // (37 inputs: int8's bounds are too wide to rule out much)
              EXPECT_LT(static_cast<int64_t>(open.size()), std::max<int64_t>(1, rows / 4)) << in << "x" << out;
              EXPECT_LT(after.fp32_logits - before.fp32_logits, rows * out / 4) << "too few outputs ruled out";
            }
          }
        }
      }
    }
  }
}

TEST_P(ScreenedArgmax, BeamStepLeavesNonFiniteRowsOpenAndStepsAsideElsewhere) {
  torch::manual_seed(22);
  auto w = torch::randn({100, 32}), x = torch::randn({3, 32}) * 4.0;
  const auto screen = build_screen(w, {});
  at::Tensor values, indices, extra;
  std::vector<int64_t> open;
  {
    torch::NoGradGuard no_grad;
    x[1][3] = std::nan("");
    EXPECT_EQ(try_screened_log_softmax_top_k(*screen, x, w, {}, 10, {}, &values, &indices, &extra, &open),
              int8_screen_runs());
    if (int8_screen_runs()) {
      EXPECT_EQ(open, std::vector<int64_t>{1});
    }
    EXPECT_FALSE(try_screened_log_softmax_top_k(*screen, x, w, {}, 101, {}, &values, &indices, &extra, &open))
        << "wider than the row";
    EXPECT_FALSE(try_screened_log_softmax_top_k(*screen, x, w, {}, 5, {100}, &values, &indices, &extra, &open))
        << "an extra column beyond the row";
    EXPECT_FALSE(try_screened_log_softmax_top_k(*screen, x.to(torch::kBFloat16), w, {}, 5, {}, &values, &indices,
                                                &extra, &open));
  }
  EXPECT_FALSE(try_screened_log_softmax_top_k(*screen, x, w, {}, 5, {}, &values, &indices, &extra, &open))
      << "gradients on";
}

// A real (random, tiny) model with a projection that makes its choices clear: beam search through
// the screen (the output layer prepared with it) finds the hypotheses the full projection finds,
// with their scores to within the normaliser's int8 tail, in batches of few rows and of more, and
// at the length limit (eos forced through the extra column).
TEST_P(ScreenedArgmax, BeamSearchThroughTheScreenFindsTheFullProjectionsHypotheses) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 300;
  torch::manual_seed(23);
  Transformer screened(c), full(c);
  {
    torch::NoGradGuard no_grad;
    screened->fc_out->weight.mul_(6.0);  // (the embedding it is tied to as well)
    const auto from = screened->named_parameters();
    for (auto& item : full->named_parameters()) item.value().copy_(from[item.key()]);
  }
  screened->eval();
  full->eval();
  prepare_linears_for_inference(*screened, InferencePrecision::kFloat, &screened->fc_out);
  prepare_linears_for_inference(*full, InferencePrecision::kFloat);
  auto src = torch::randint(4, 300, {12, 9}, torch::kLong);
  src.index_put_({2, torch::indexing::Slice(5)}, 0);
  torch::NoGradGuard no_grad;
  for (int64_t max_len_b : {14, 3}) {
    SearchOptions o;
    o.beam_size = 5;
    o.nbest = 2;
    o.max_len_a = 0;
    o.max_len_b = max_len_b;
    for (int64_t batch : {1, 12}) {
      for (int64_t start = 0; start + batch <= src.size(0); start += batch) {
        auto part = src.slice(0, start, start + batch);
        TransformerDecoder a(screened, true), b(full, true);
        const auto before = screen_stats();
        auto got = search(a, part, o);
        const auto after = screen_stats();
        auto expected = search(b, part, o);
        if (int8_screen_runs()) {
          EXPECT_GT(after.rows, before.rows);
        }
        for (int64_t i = 0; i < batch; ++i)
          for (size_t j = 0; j < expected[i].size(); ++j) {
            EXPECT_EQ(got[i][j].tokens, expected[i][j].tokens) << "batch " << batch << " sentence " << start + i;
            EXPECT_NEAR(got[i][j].score, expected[i][j].score, 2e-3) << "batch " << batch << " sentence " << start + i;
          }
      }
    }
  }
}

// A real (random, tiny) model: greedy search without scores finds the tokens it finds with
// them, and its scores are NaN, not a number that looks right; in batches of few rows and of
// more (a GEMM's), with every output a tie (each projection row twice), where every row is
// left to the full projection, and under a shortlist (each sentence its own tokens).
TEST_P(ScreenedArgmax, GreedySearchWithoutScoresFindsTheSameTokens) {
  for (bool ties : {false, true}) {
    ModelConfig c = ModelConfig::preset("tiny");
    c.src_vocab_size = c.tgt_vocab_size = 300;
    torch::manual_seed(8);
    Transformer model(c);
    model->eval();
    if (ties) {
      torch::NoGradGuard no_grad;
      auto w = model->fc_out->weight.view({150, 2, -1});  // [pairs, 2, D]
      w.select(1, 1).copy_(w.select(1, 0));
      auto b = model->fc_out->bias.view({150, 2});  // [pairs, 2]
      b.select(1, 1).copy_(b.select(1, 0));
    }
    prepare_linears_for_inference(*model, InferencePrecision::kFloat, &model->fc_out);
    auto src = torch::randint(4, 300, {12, 9}, torch::kLong);
    src.index_put_({2, torch::indexing::Slice(5)}, 0);
    SearchOptions with;
    with.beam_size = 1;
    with.max_len_a = 0;
    with.max_len_b = 12;
    SearchOptions without = with;
    without.scores = false;
    torch::NoGradGuard no_grad;
    int64_t rows = 0, open_rows = 0;  // the screen's, without a shortlist
    for (int64_t batch : {1, 3, 6, 12}) {
      for (int64_t start = 0; start + batch <= src.size(0); start += batch) {
        auto part = src.slice(0, start, start + batch);
        for (bool shortlist : {false, true}) {
          Steering steering;
          if (shortlist) {
            steering.resize(static_cast<size_t>(batch));
            for (int64_t i = 0; i < batch; ++i) {
              // Sentence i may produce eos and every token t with (t + i) % 3 != 0.
              for (int64_t t = 3; t < 300; ++t)
                if (t == with.eos_id || (t + start + i) % 3 != 0) steering[static_cast<size_t>(i)].vocabulary.push_back(t);
            }
          }
          TransformerDecoder a(model, true), b(model, true);
          auto scored = search(a, part, with, steering);
          const auto before = screen_stats();
          auto unscored = search(b, part, without, steering);
          const auto after = screen_stats();
          if (!shortlist) {  // a shortlist can block one of a pair
            rows += after.rows - before.rows;
            open_rows += after.open_rows - before.open_rows;
          }
          for (int64_t i = 0; i < batch; ++i) {
            EXPECT_EQ(unscored[i][0].tokens, scored[i][0].tokens) << "batch " << batch << " sentence " << start + i
                                                                  << (ties ? ", ties" : "") << (shortlist ? ", shortlist" : "");
            EXPECT_TRUE(std::isnan(unscored[i][0].score));
            EXPECT_FALSE(std::isnan(scored[i][0].score));
            if (!shortlist) continue;
            for (int64_t t : unscored[i][0].tokens)
              EXPECT_TRUE(t == with.eos_id || (t + start + i) % 3 != 0) << "token " << t << " off the shortlist";
          }
        }
      }
    }
    if (int8_screen_runs() && ties) {
      EXPECT_GT(rows, 0);
      EXPECT_EQ(open_rows, rows) << "every row a tie: every row open";
    }
  }
}

}  // namespace
}  // namespace torchmt
