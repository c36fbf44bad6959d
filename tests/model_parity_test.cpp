// C++ modules vs the Python reference classes (tests/reference): same weights, same
// padded batch -> same logits to 1e-5, and identical state-dict keys and shapes.
#include <functional>

#include <gtest/gtest.h>

#include "test_support.h"
#include "model/masks.h"
#include "torchmt/model/moe_layer.h"
#include "torchmt/model/multi_head_attention.h"
#include "model/self_attention.h"
#include "torchmt/model/transformer.h"

namespace torchmt {
namespace {

using test::TempDir;

std::string parity_script() { return test::source_dir() + "/tests/reference/parity.py"; }

// Runs `parity.py MODE` on `items` (written for Python in `dir`); false, with the script's
// output as a test failure, when it exits non-zero.
bool run_reference(const std::string& mode, const TempDir& dir, const std::map<std::string, c10::IValue>& items,
                   std::map<std::string, torch::Tensor>* out) {
  test::save_for_python(dir.file("in.pt"), items);
  auto run = test::run_command(test::python() + " " + parity_script() + " " + mode + " " + dir.file("in.pt") + " " +
                               dir.file("out.pt"));
  if (run.exit_code != 0) {
    ADD_FAILURE() << "parity.py " << mode << " exited " << run.exit_code << ": " << run.output;
    return false;
  }
  *out = test::load_from_python(dir.file("out.pt"));
  return true;
}

ModelConfig parity_config(const std::string& activation) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = 53;
  c.tgt_vocab_size = 61;
  c.d_model = 32;
  c.num_heads = 4;
  c.d_ff = 48;
  c.max_positions = 40;
  c.activation = parse_activation(activation);
  return c;
}

// A batch of three sentences of different lengths, right-padded with pad id 0.
std::pair<torch::Tensor, torch::Tensor> padded_batch(const ModelConfig& c) {
  torch::manual_seed(7);
  auto src = torch::randint(1, c.src_vocab_size, {3, 9}, torch::kLong);
  auto tgt = torch::randint(1, c.tgt_vocab_size, {3, 6}, torch::kLong);
  src.index_put_({1, torch::indexing::Slice(5)}, 0);
  src.index_put_({2, torch::indexing::Slice(2)}, 0);
  tgt.index_put_({0, torch::indexing::Slice(4)}, 0);
  tgt.index_put_({2, torch::indexing::Slice(3)}, 0);
  return {src, tgt};
}

void check_model_parity(const std::string& activation, bool tied,
                        const std::function<void(ModelConfig&)>& variant = nullptr) {
  TempDir dir;
  ModelConfig config = parity_config(activation);
  if (tied) {
    config.tgt_vocab_size = config.src_vocab_size;
    config.tie_embeddings = true;
  }
  if (variant) variant(config);
  torch::manual_seed(1);
  Transformer model(config);
  model->eval();
  auto [src, tgt] = padded_batch(config);
  auto items = test::state_items(*model);
  items["config_json"] = config.to_json();
  items["src"] = src;
  items["tgt"] = tgt;
  std::map<std::string, torch::Tensor> reference;
  ASSERT_TRUE(run_reference("model", dir, items, &reference));
  auto expected = reference.at("logits");

  torch::NoGradGuard no_grad;
  auto logits = model->forward(src, tgt);
  ASSERT_EQ(logits.sizes(), expected.sizes());
  EXPECT_TRUE(torch::allclose(logits, expected, 1e-5, 1e-5))
      << "max abs diff " << (logits - expected).abs().max().item<double>();
}

TEST(ModelParity, LogitsMatchReferenceGelu) { check_model_parity("gelu", false); }
TEST(ModelParity, LogitsMatchReferenceRelu) { check_model_parity("relu", false); }
TEST(ModelParity, LogitsMatchReferenceTiedEmbeddings) { check_model_parity("relu", true); }

// The documents' modern variants, each a switch of the same model (state-dict keys and
// shapes are checked by parity.py before the logits).
TEST(ModelParity, PreLnMatchesReference) {
  check_model_parity("gelu", false, [](ModelConfig& c) { c.norm = Norm::kPre; });
}
TEST(ModelParity, RotaryPositionsMatchReference) {
  check_model_parity("relu", false, [](ModelConfig& c) { c.positions = Positions::kRope; });
}
TEST(ModelParity, LearnedPositionsMatchReference) {
  check_model_parity("relu", false, [](ModelConfig& c) { c.positions = Positions::kLearned; });
}
TEST(ModelParity, GroupedQueryAttentionMatchesReference) {
  check_model_parity("relu", false, [](ModelConfig& c) { c.kv_heads = 2; });
}
TEST(ModelParity, MultiQueryAttentionMatchesReference) {
  check_model_parity("gelu", true, [](ModelConfig& c) { c.kv_heads = 1; });
}
TEST(ModelParity, ModernPresetMatchesReference) {
  check_model_parity("relu", true, [](ModelConfig& c) {
    const ModelConfig modern = ModelConfig::preset("modern-small");
    c.norm = modern.norm;
    c.positions = modern.positions;
    c.kv_heads = c.num_heads / 2;
  });
}

TEST(ModelParity, MixtureOfExpertsMatchesReference) {
  check_model_parity("gelu", false, [](ModelConfig& c) {
    c.ffn = Ffn::kMoe;
    c.experts = 4;
    c.top_k = 2;
  });
}

// One MoELayer against the document's dense computation (every expert on every token), and
// its load-balancing loss against the reference's.
TEST(ModelParity, MoELayerOutputAndAuxLossMatchReference) {
  TempDir dir;
  ModelConfig c = parity_config("relu");
  c.ffn = Ffn::kMoe;
  c.experts = 5;
  c.top_k = 3;
  torch::manual_seed(9);
  MoELayer moe(MoELayerOptions(c.d_model, c.d_ff, c.experts).top_k(c.top_k).dropout(0.0));
  moe->eval();
  auto x = torch::randn({3, 7, c.d_model});
  auto items = test::state_items(*moe);
  items["config_json"] = c.to_json();
  items["x"] = x;
  std::map<std::string, torch::Tensor> expected;
  ASSERT_TRUE(run_reference("moe", dir, items, &expected));
  torch::NoGradGuard no_grad;
  auto out = moe(x);
  EXPECT_TRUE(torch::allclose(out, expected.at("output"), 1e-5, 1e-5))
      << (out - expected.at("output")).abs().max().item<double>();
  EXPECT_NEAR(moe->aux_loss.item<double>(), expected.at("aux_loss").item<double>(), 1e-6);
}

// Reference 000's single-head SelfAttention: the Python class's output and weights, and
// MultiHeadAttention with one head and an identity W_o.
TEST(ModelParity, SingleHeadSelfAttentionMatchesReferenceAndOneHeadAttention) {
  TempDir dir;
  torch::manual_seed(12);
  const int64_t d = 24;
  SelfAttention sa(d);
  auto x = torch::randn({2, 5, d});
  auto mask = torch::ones({2, 1, 5}, torch::kBool);  // [B, 1, T]: padded keys of sentence 1
  mask.index_put_({1, 0, torch::indexing::Slice(3)}, false);
  auto items = test::state_items(*sa);
  ModelConfig c = parity_config("relu");
  c.d_model = d;
  items["config_json"] = c.to_json();
  items["x"] = x;
  items["mask"] = mask;
  std::map<std::string, torch::Tensor> expected;
  ASSERT_TRUE(run_reference("self_attention", dir, items, &expected));
  torch::NoGradGuard no_grad;
  auto [out, weights] = sa(x, mask);
  EXPECT_TRUE(torch::allclose(out, expected.at("output"), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(weights, expected.at("weights"), 1e-5, 1e-5));

  MultiHeadAttention one(MultiHeadAttentionOptions(d, 1).dropout(0.0));
  one->eval();
  for (auto [mine, theirs] : {std::make_pair(one->W_q, sa->W_q), std::make_pair(one->W_k, sa->W_k),
                              std::make_pair(one->W_v, sa->W_v)}) {
    mine->weight.copy_(theirs->weight);
    mine->bias.copy_(theirs->bias);
  }
  one->W_o->weight.copy_(torch::eye(d));
  one->W_o->bias.zero_();
  auto [mha_out, mha_weights] = one->forward_with_weights(x, x, x, mask.unsqueeze(1));  // [B, 1, 1, T]
  EXPECT_TRUE(torch::allclose(out, mha_out, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(weights, mha_weights.squeeze(1), 1e-5, 1e-5));
}

TEST(ModelParity, MultiHeadAttentionWithMaskMatchesReference) {
  TempDir dir;
  torch::manual_seed(3);
  MultiHeadAttention mha(MultiHeadAttentionOptions(32, 4).dropout(0.0));
  mha->eval();
  auto query = torch::randn({2, 5, 32});
  auto key = torch::randn({2, 6, 32});
  auto mask = torch::ones({2, 1, 5, 6}, torch::kBool);
  mask.index_put_({0, 0, torch::indexing::Slice(), torch::indexing::Slice(4)}, false);  // padded keys
  mask.index_put_({1, 0, 2, torch::indexing::Slice(0, 3)}, false);                     // a ragged row
  auto items = test::state_items(*mha);
  ModelConfig c = parity_config("gelu");
  items["config_json"] = c.to_json();
  items["query"] = query;
  items["key"] = key;
  items["mask"] = mask;
  std::map<std::string, torch::Tensor> expected;
  ASSERT_TRUE(run_reference("mha", dir, items, &expected));

  torch::NoGradGuard no_grad;
  auto fused = mha->forward(query, key, key, mask);
  auto [explicit_out, weights] = mha->forward_with_weights(query, key, key, mask);
  EXPECT_TRUE(torch::allclose(fused, expected.at("output"), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(explicit_out, expected.at("output"), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(weights, expected.at("weights"), 1e-5, 1e-5));
}

TEST(ModelParity, BaseParameterCountMatchesReference) {
  for (const std::string preset : {"base", "modern-base", "moe"}) {
    ModelConfig base = ModelConfig::preset(preset == "moe" ? "small" : preset);
    if (preset == "moe") base.ffn = Ffn::kMoe;
    base.src_vocab_size = base.tgt_vocab_size = 8000;
    Transformer model(base);
    auto run = test::run_command(test::python() + " " + parity_script() + " count '" + base.to_json() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(std::to_string(count_parameters(model)) + "\n", run.output) << preset;
  }
}

}  // namespace
}  // namespace torchmt
