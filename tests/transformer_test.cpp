// Properties of the Transformer itself, on CPU and (when present) CUDA.
#include <gtest/gtest.h>

#include "test_support.h"
#include "torchmt/model/masks.h"
#include "torchmt/model/transformer.h"

namespace torchmt {
namespace {

ModelConfig small_test_config() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = 40;
  c.tgt_vocab_size = 45;
  c.d_model = 32;
  c.d_ff = 64;
  return c;
}

class TransformerOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda") {
      TORCHMT_SKIP_WITHOUT_CUDA();
    }
    device = GetParam() == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(GetParam());
    torch::manual_seed(11);
    model = Transformer(small_test_config());
    model->to(device);
    model->eval();
  }
  torch::Tensor tokens(std::initializer_list<std::initializer_list<int64_t>> rows) {
    std::vector<torch::Tensor> out;
    for (const auto& r : rows) out.push_back(torch::tensor(std::vector<int64_t>(r), torch::kLong));
    return torch::stack(out).to(device);
  }
  torch::Device device{torch::kCPU};
  Transformer model{nullptr};
};

TEST_P(TransformerOnDevice, LogitsAtOrBeforeTIgnoreLaterTargets) {
  torch::NoGradGuard no_grad;
  auto src = tokens({{5, 6, 7, 8, 9}});
  auto tgt_a = tokens({{2, 10, 11, 12, 13, 14}});
  auto tgt_b = tokens({{2, 10, 11, 30, 31, 32}});  // differs after position 2
  auto a = model->forward(src, tgt_a);
  auto b = model->forward(src, tgt_b);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::allclose(a.index({Slice(), Slice(0, 3)}), b.index({Slice(), Slice(0, 3)}), 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(a.index({Slice(), Slice(3)}), b.index({Slice(), Slice(3)}), 1e-5, 1e-5));
}

TEST_P(TransformerOnDevice, SentenceAloneEqualsSentencePaddedInBatch) {
  torch::NoGradGuard no_grad;
  auto src_alone = tokens({{5, 6, 7}});
  auto tgt_alone = tokens({{2, 10, 11}});
  auto src_batch = tokens({{5, 6, 7, 0, 0, 0}, {8, 9, 10, 11, 12, 13}});
  auto tgt_batch = tokens({{2, 10, 11, 0, 0}, {2, 14, 15, 16, 17}});
  auto alone = model->forward(src_alone, tgt_alone);
  auto batched = model->forward(src_batch, tgt_batch);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::allclose(alone[0], batched.index({0, Slice(0, 3)}), 1e-5, 1e-5))
      << (alone[0] - batched.index({0, Slice(0, 3)})).abs().max().item<double>();
}

TEST_P(TransformerOnDevice, FusedAndExplicitAttentionAgree) {
  torch::NoGradGuard no_grad;
  auto src = tokens({{5, 6, 7, 0}, {8, 9, 10, 11}});
  auto tgt = tokens({{2, 10, 0}, {2, 14, 15}});
  auto src_mask = make_padding_mask(src, 0);
  auto tgt_mask = make_target_mask(tgt, 0);
  auto memory = model->encode(src, src_mask);
  auto fused = model->decode(tgt, memory, src_mask, tgt_mask);
  std::vector<torch::Tensor> weights;
  auto explicit_path = model->decode(tgt, memory, src_mask, tgt_mask, &weights);
  EXPECT_TRUE(torch::allclose(fused, explicit_path, 1e-5, 1e-5));
  ASSERT_EQ(weights.size(), static_cast<size_t>(model->config().num_decoder_layers));
  EXPECT_EQ(weights[0].sizes(), torch::IntArrayRef({2, 4, 3, 4}));  // [B, H, T, S]
  // Padded source keys get no attention; each row sums to one.
  EXPECT_EQ(weights[0].index({0, torch::indexing::Slice(), torch::indexing::Slice(), 3}).abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(torch::allclose(weights[0].sum(-1), torch::ones({2, 4, 3}, weights[0].options()), 1e-5, 1e-5));
}

TEST_P(TransformerOnDevice, FullyMaskedKeysGiveNoNaN) {
  torch::NoGradGuard no_grad;
  auto src = tokens({{0, 0, 0}, {5, 6, 7}});  // first source is all padding
  auto tgt = tokens({{2, 3}, {2, 9}});
  auto logits = model->forward(src, tgt);
  EXPECT_FALSE(logits.isnan().any().item<bool>());
  auto mha = model->decoder_layers[0]->as<TransformerDecoderLayer>()->cross_attn;
  auto q = torch::randn({1, 2, 32}, torch::TensorOptions().device(device));
  auto none = torch::zeros({1, 1, 2, 3}, torch::TensorOptions().dtype(torch::kBool).device(device));
  auto [out, w] = mha->forward_with_weights(q, q.repeat({1, 2, 1}).narrow(1, 0, 3), q.repeat({1, 2, 1}).narrow(1, 0, 3), none);
  EXPECT_FALSE(out.isnan().any().item<bool>());
  EXPECT_FALSE(mha->forward(q, q.repeat({1, 2, 1}).narrow(1, 0, 3), q.repeat({1, 2, 1}).narrow(1, 0, 3), none)
                   .isnan().any().item<bool>());
}

TEST_P(TransformerOnDevice, EveryParameterGetsAGradient) {
  model->train();
  auto src = tokens({{5, 6, 7, 0}, {8, 9, 10, 11}});
  auto tgt = tokens({{2, 10, 0}, {2, 14, 15}});
  auto logits = model->forward(src, tgt);
  logits.pow(2).mean().backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
}

TEST_P(TransformerOnDevice, IncrementalDecodingEqualsFullRecomputation) {
  torch::NoGradGuard no_grad;
  auto src = tokens({{5, 6, 7, 0}, {8, 9, 10, 11}});
  auto tgt = tokens({{2, 10, 12, 13}, {2, 14, 15, 16}});
  auto src_mask = make_padding_mask(src, 0);
  auto memory = model->encode(src, src_mask);
  auto full = model->fc_out(model->decode(tgt, memory, src_mask, make_target_mask(tgt, 0)));  // [B, T, V]
  DecoderCache cache = model->start_cache(memory, src_mask);
  for (int64_t t = 0; t < tgt.size(1); ++t) {
    auto step = model->decode_step(tgt.select(1, t), cache);  // [B, V]
    EXPECT_TRUE(torch::allclose(step, full.select(1, t), 1e-5, 1e-5)) << "position " << t;
  }
  EXPECT_EQ(cache.layers[0].self_k.size(2), tgt.size(1));
}

TEST_P(TransformerOnDevice, MasksLiveOnTheInputDevice) {
  auto src = tokens({{5, 0}});
  EXPECT_EQ(make_padding_mask(src, 0).device(), device);
  EXPECT_EQ(make_target_mask(src, 0).device(), device);
  EXPECT_EQ(make_target_mask(src, 0).sizes(), torch::IntArrayRef({1, 1, 2, 2}));
}

INSTANTIATE_TEST_SUITE_P(Devices, TransformerOnDevice, ::testing::Values("cpu", "cuda"));

TEST(Transformer, StateDictNamesMirrorTheReference) {
  Transformer model(small_test_config());
  std::set<std::string> keys;
  for (const auto& p : model->named_parameters()) keys.insert(p.key());
  for (const auto& b : model->named_buffers()) keys.insert(b.key());
  for (const char* k : {"src_embedding.weight", "tgt_embedding.weight", "pos_encoding.pe",
                        "encoder_layers.0.self_attn.W_q.weight", "encoder_layers.1.ffn.linear2.bias",
                        "encoder_layers.0.norm2.weight", "decoder_layers.1.cross_attn.W_o.weight",
                        "decoder_layers.0.norm3.bias", "fc_out.weight", "fc_out.bias"}) {
    EXPECT_TRUE(keys.count(k)) << k;
  }
}

TEST(Transformer, TiedEmbeddingsShareOneTensor) {
  ModelConfig c = small_test_config();
  c.tgt_vocab_size = c.src_vocab_size;
  c.tie_embeddings = true;
  Transformer model(c);
  auto params = model->named_parameters();
  EXPECT_TRUE(params["src_embedding.weight"].is_same(params["tgt_embedding.weight"]));
  EXPECT_TRUE(params["src_embedding.weight"].is_same(params["fc_out.weight"]));
  Transformer untied(small_test_config());
  EXPECT_EQ(count_parameters(model) + 2 * c.src_vocab_size * c.d_model, count_parameters(Transformer([&] {
              auto u = c;
              u.tie_embeddings = false;
              return u;
            }())));
}

TEST(Transformer, PresetsHaveThePaperShapes) {
  auto base = ModelConfig::preset("base");
  EXPECT_EQ(base.d_model, 512);
  EXPECT_EQ(base.num_heads, 8);
  EXPECT_EQ(base.num_encoder_layers, 6);
  EXPECT_EQ(base.d_ff, 2048);
  auto big = ModelConfig::preset("big");
  EXPECT_EQ(big.d_model, 1024);
  EXPECT_EQ(big.num_heads, 16);
  EXPECT_DOUBLE_EQ(big.dropout, 0.3);
  EXPECT_THROW(ModelConfig::preset("huge"), std::invalid_argument);
  auto round = ModelConfig::from_json(ModelConfig::preset("small").to_json());
  EXPECT_EQ(round.to_json(), ModelConfig::preset("small").to_json());
  auto bad = base;
  bad.num_heads = 7;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace torchmt
