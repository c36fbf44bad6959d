// Properties of the Transformer itself, on CPU and (when present) CUDA.
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/function.h>

#include "test_support.h"
#include "torchmt/model/kv_cache.h"
#include "model/masks.h"
#include "torchmt/model/moe_layer.h"
#include "torchmt/model/rotary.h"
#include "torchmt/model/transformer.h"
#include "torchmt/util/device.h"

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

// Each switch of the model configuration (model_config.h) on its own, and the modern preset's
// combination.
ModelConfig variant_config(const std::string& variant) {
  ModelConfig c = small_test_config();
  if (variant == "pre_ln" || variant == "modern") c.norm = Norm::kPre;
  if (variant == "rope" || variant == "modern") c.positions = Positions::kRope;
  if (variant == "learned") c.positions = Positions::kLearned;
  if (variant == "gqa" || variant == "modern") c.kv_heads = 2;
  if (variant == "mqa") c.kv_heads = 1;
  if (variant == "moe") {
    c.ffn = Ffn::kMoe;
    c.experts = 4;
    c.top_k = 2;
  }
  return c;
}

class TransformerOnDevice : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    const std::string name = std::get<0>(GetParam());
    if (name == "cuda") {
      TORCHMT_SKIP_WITHOUT_CUDA();
    }
    device = name == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(name);
    torch::manual_seed(11);
    model = Transformer(variant_config(std::get<1>(GetParam())));
    if (model->config().norm == Norm::kPre) {
      // LayerNorm's fresh ones/zeros would hide a misplaced norm: give them values.
      torch::NoGradGuard no_grad;
      for (auto& p : model->named_parameters())
        if (p.key().find("norm") != std::string::npos) p.value().uniform_(0.5, 1.5);
    }
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
  auto loss = logits.pow(2).mean();
  if (auto aux = model->moe_aux_loss(); aux.defined()) loss = loss + aux;
  loss.backward();
  // A mixture's expert gets a gradient when tokens were routed to it (and only then).
  std::map<std::string, int64_t> expert_tokens;
  for (const auto& m : model->named_modules())
    if (const auto* moe = m.value()->as<MoELayer>())
      for (size_t e = 0; e < moe->tokens_per_expert.size(); ++e)
        expert_tokens[m.key() + ".experts." + std::to_string(e) + "."] = moe->tokens_per_expert[e];
  int64_t experts_used = 0;
  for (const auto& p : model->named_parameters()) {
    bool routed = true;
    for (const auto& [prefix, tokens] : expert_tokens)
      if (p.key().rfind(prefix, 0) == 0) routed = tokens > 0, experts_used += tokens > 0;
    if (!routed) {
      EXPECT_TRUE(!p.value().grad().defined() || p.value().grad().abs().sum().item<double>() == 0.0) << p.key();
      continue;
    }
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
  if (!expert_tokens.empty()) {
    EXPECT_GT(experts_used, 0);
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
  EXPECT_EQ(cache.layers[0].self_k.size(1), model->config().key_value_heads());
  EXPECT_EQ(cache.layers[0].cross_k.size(1), model->config().key_value_heads());
}

// In-flight batching: rows join a running batch between steps (DecoderCache::append), at their
// first position while the others go on; rows leave (select) and the cache trims what no
// remaining row uses. Every row's logits equal that row decoded alone, at every step.
TEST_P(TransformerOnDevice, RowJoiningARunningBatchEqualsTheRowAlone) {
  torch::NoGradGuard no_grad;
  const std::vector<std::vector<int64_t>> sources = {{5, 6, 7}, {8, 9, 10, 11, 12}, {13, 14, 15, 16, 17, 18, 19}, {20, 21}};
  auto target = [](size_t row, int64_t t) -> int64_t { return t == 0 ? 2 : 3 + (row * 7 + t * 5) % 40; };
  auto padded = [&](std::vector<size_t> rows) {  // [n, S], pad 0
    size_t width = 0;
    for (auto r : rows) width = std::max(width, sources[r].size());
    auto out = torch::zeros({static_cast<int64_t>(rows.size()), static_cast<int64_t>(width)}, torch::kLong);
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < sources[rows[i]].size(); ++j) out[i][j] = sources[rows[i]][j];
    return out.to(device);
  };
  auto fresh = [&](const torch::Tensor& src) {
    auto mask = make_padding_mask(src, 0);
    return model->start_cache(model->encode(src, mask), mask);
  };
  // Each row alone, 10 teacher-forced steps.
  std::vector<std::vector<torch::Tensor>> alone(sources.size());
  for (size_t r = 0; r < sources.size(); ++r) {
    DecoderCache cache = fresh(padded({r}));
    for (int64_t t = 0; t < 10; ++t)
      alone[r].push_back(model->decode_step(torch::full({1}, target(r, t), torch::kLong).to(device), cache)[0]);
  }
  DecoderCache cache = fresh(padded({0, 1}));
  std::vector<size_t> rows = {0, 1};
  std::vector<int64_t> position = {0, 0, 0, 0};
  auto steps = [&](int count, const std::string& phase) {
    for (int s = 0; s < count; ++s) {
      std::vector<int64_t> last;
      for (auto r : rows) last.push_back(target(r, position[r]));
      auto logits = model->decode_step(torch::tensor(last, torch::kLong).to(device), cache);  // [n, V]
      for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_TRUE(torch::allclose(logits[static_cast<int64_t>(i)], alone[rows[i]][position[rows[i]]], 1e-5, 1e-5))
            << phase << ": row " << rows[i] << " position " << position[rows[i]];
        ++position[rows[i]];
      }
    }
  };
  steps(3, "before the join");
  EXPECT_FALSE(cache.ragged());
  cache.append(fresh(padded({2, 3})));  // one longer source (S grows to 7), one shorter
  rows = {0, 1, 2, 3};
  EXPECT_TRUE(cache.ragged());
  EXPECT_EQ(cache.src_mask.size(3), 7);
  steps(4, "after the join");
  cache.select(torch::tensor(std::vector<int64_t>{2, 3}, torch::kLong).to(device));  // the first rows finish
  rows = {2, 3};
  EXPECT_FALSE(cache.ragged()) << "the joined rows are all that is left: uniform again";
  EXPECT_EQ(cache.layers[0].self_k.size(2), 4) << "columns before the joined rows' start are trimmed";
  steps(2, "after the first rows left");
  cache.select(torch::tensor(std::vector<int64_t>{1}, torch::kLong).to(device));  // the longer source leaves
  rows = {3};
  EXPECT_EQ(cache.src_mask.size(3), 2) << "source columns past the remaining row's extent are trimmed";
  EXPECT_EQ(cache.layers[0].cross_k.size(2), 2);
  steps(2, "after the longer source left");
}

// A beam reorder is kept pending (LayerKVCache::self_rows) and applied by the next step's
// append in one copy: equal to gathering and then concatenating, for views and any dtype.
TEST(KeyValueCache, AppendPositionsEqualsGatherThenConcatenate) {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto full = torch::randn({4, 2, 9, 8}).to(dtype);
    auto past = full.narrow(2, 2, 5);  // [4, 2, 5, 8], a trimmed view: not contiguous
    auto rows = torch::tensor(std::vector<int64_t>{3, 0, 0, 2, 1}, torch::kLong);
    auto step = torch::randn({5, 2, 1, 8}).to(dtype);
    auto want = torch::cat({past.index_select(0, rows), step}, 2);  // [5, 2, 6, 8]
    EXPECT_TRUE(torch::equal(append_positions(past, rows, step), want));
    auto same_rows = torch::randn({4, 2, 1, 8}).to(dtype);
    EXPECT_TRUE(torch::equal(append_positions(past, torch::Tensor(), same_rows), torch::cat({past, same_rows}, 2)));
    EXPECT_TRUE(torch::equal(append_positions(torch::Tensor(), rows, step), step));
    LayerKVCache layer;
    layer.self_k = past;
    layer.self_rows = rows;
    EXPECT_TRUE(torch::equal(layer.keys(), past.index_select(0, rows)));
  }
  auto past = torch::randn({2, 1, 3, 4});
  EXPECT_THROW(append_positions(past, torch::tensor(std::vector<int64_t>{2}, torch::kLong), torch::randn({1, 1, 1, 4})),
               std::out_of_range);
}

// With no reorder, a new position goes into the room a buffer append_positions made has
// after its last position, when nothing else holds it; the values equal a concatenation
// either way, and a tensor append_positions did not make (room false) is never written.
TEST(KeyValueCache, AppendPositionsWritesInPlaceOnlyIntoRoomItHoldsAlone) {
  torch::manual_seed(4);
  auto base = torch::randn({3, 2, 6, 8});
  auto past = base.narrow(2, 1, 3);  // [3, 2, 3, 8]: strides of a buffer with room, but not one
  auto step = torch::randn({3, 2, 1, 8});
  auto before = base.clone();
  bool room = false;
  auto grown = append_positions(past, torch::Tensor(), step, &room);  // a copy, with room
  EXPECT_TRUE(room);
  EXPECT_TRUE(torch::equal(base, before)) << "not its buffer: never written";
  EXPECT_TRUE(torch::equal(grown, torch::cat({past, step}, 2)));
  EXPECT_GT(grown.stride(1), grown.size(2) * grown.size(3)) << "room to grow";
  // Another holder of the buffer (a copied cache): a copy, so that it never sees a write.
  auto holder = grown;
  auto copied = append_positions(grown, torch::Tensor(), step * 2, &room);
  EXPECT_NE(copied.data_ptr(), holder.data_ptr());
  auto expected = torch::cat({holder, step * 2}, 2);
  EXPECT_TRUE(torch::equal(copied, expected));
  grown = holder = at::Tensor();
  // `copied` alone holds its buffer, with room: the next position goes in place.
  const auto* mine = copied.data_ptr();
  EXPECT_TRUE(room);
  auto next = append_positions(copied, torch::Tensor(), step * 3, &room);
  copied = at::Tensor();
  expected = torch::cat({expected, step * 3}, 2);
  EXPECT_EQ(next.data_ptr(), mine) << "no other holder, room left: written in place";
  EXPECT_TRUE(room);
  EXPECT_TRUE(torch::equal(next, expected));
  bool no_room = false;
  auto elsewhere = append_positions(next, torch::Tensor(), step * 4, &no_room);
  EXPECT_NE(elsewhere.data_ptr(), next.data_ptr()) << "room not claimed: a copy";
  auto reordered =
      append_positions(next, torch::tensor(std::vector<int64_t>{2, 0}, torch::kLong), step.narrow(0, 0, 2), &room);
  EXPECT_FALSE(room) << "a reorder's copy is exact";
  EXPECT_TRUE(torch::equal(reordered, torch::cat({expected.index_select(0, torch::tensor(std::vector<int64_t>{2, 0})),
                                                 step.narrow(0, 0, 2)},
                                                2)));
}

// Beams share their sentence's source side (DecoderCache::expand): every step's logits equal
// those of a cache that copied it per beam, through beam reorders, sentences leaving
// (grouped selects keep sharing) and an index that mixes sentences within a group (unshared).
TEST_P(TransformerOnDevice, BeamsSharingTheSourceSideEqualCopiedRows) {
  torch::NoGradGuard no_grad;
  auto src = torch::tensor({5, 6, 7, 8, 0, 9, 10, 11, 12, 13, 14, 15, 0, 0, 0}, torch::kLong).view({3, 5}).to(device);
  auto mask = make_padding_mask(src, 0);
  auto memory = model->encode(src, mask);
  const int64_t k = 2;
  DecoderCache shared = model->start_cache(memory, mask), copied = model->start_cache(memory, mask);
  shared.expand(k);
  copied.select(torch::arange(3, torch::TensorOptions().dtype(torch::kLong).device(device)).repeat_interleave(k));
  EXPECT_EQ(shared.batch_size(), 6);
  const bool cpu = device.is_cpu();  // elsewhere the rows are copied (kv_cache.h)
  EXPECT_EQ(shared.layers[0].cross_k.size(0), cpu ? 3 : 6) << "one source row per sentence";
  auto index = [&](std::vector<int64_t> rows) { return torch::tensor(rows, torch::kLong).to(device); };
  auto step = [&](std::vector<int64_t> tokens, const std::string& phase) {
    auto a = model->decode_step(index(tokens), shared), b = model->decode_step(index(tokens), copied);
    EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-6)) << phase;
  };
  step({2, 2, 2, 2, 2, 2}, "first step");
  for (auto* c : {&shared, &copied}) c->select_target_side(index({1, 0, 2, 2, 5, 4}));
  step({4, 9, 7, 7, 11, 3}, "beams reordered");
  for (auto* c : {&shared, &copied}) c->select(index({4, 5, 1, 1}));  // sentence 1 leaves: still grouped
  EXPECT_EQ(shared.beam, cpu ? k : 1);
  EXPECT_EQ(shared.layers[0].cross_k.size(0), cpu ? 2 : 4);
  step({6, 8, 5, 10}, "a sentence left");
  {
    torch::AutoGradMode grad(true);  // not the decoding kernel's case: ATen's attention path
    step({3, 3, 9, 9}, "ATen attention");
  }
  for (auto* c : {&shared, &copied}) c->select(index({0, 3, 2}));  // mixes sentences: one row each
  EXPECT_EQ(shared.beam, 1);
  step({12, 4, 4}, "unshared");
}

// Rows leaving move within the cache's own tensors (DecoderCache::select: every new row i is
// old row index[i] >= i), new positions are written into room the self-attention buffer has
// and joining rows into room a previous join made: every step's logits equal those of a cache
// whose tensors another holds (every select and append copies), through leaving rows, joins,
// a reorder that cannot move in place, and a copied cache stepping on its own.
TEST_P(TransformerOnDevice, RowsMovedInPlaceEqualCopiedRows) {
  torch::NoGradGuard no_grad;
  auto src = torch::tensor({5, 6, 7, 8, 0, 9, 10, 11, 12, 13, 14, 15, 0, 0, 0, 16, 17, 0, 0, 0, 18, 19, 20, 21, 22},
                           torch::kLong)
                 .view({5, 5})
                 .to(device);
  auto fresh = [&](const torch::Tensor& s) {
    auto mask = make_padding_mask(s, 0);
    return model->start_cache(model->encode(s, mask), mask);
  };
  DecoderCache moved = fresh(src), copied = fresh(src);
  std::vector<at::Tensor> held;  // every tensor of `copied`, so that nothing of it moves in place
  auto hold = [&] {
    for (const auto& l : copied.layers)
      for (const auto& t : {l.self_k, l.self_v, l.cross_k, l.cross_v})
        if (t.defined()) held.push_back(t);
  };
  auto index = [&](std::vector<int64_t> rows) { return torch::tensor(rows, torch::kLong).to(device); };
  auto step = [&](std::vector<int64_t> tokens, const std::string& phase) {
    hold();
    auto a = model->decode_step(index(tokens), moved), b = model->decode_step(index(tokens), copied);
    EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-6)) << phase;
  };
  const bool cpu = device.is_cpu();
  step({2, 2, 2, 2, 2}, "first step");
  step({4, 9, 7, 3, 11}, "second step");
  const auto* self_before = moved.layers[0].self_k.data_ptr();
  step({6, 6, 8, 5, 4}, "third step");
  EXPECT_EQ(moved.layers[0].self_k.data_ptr() == self_before, cpu) << "the third position written in place";
  const auto* cross_before = moved.layers[0].cross_k.data_ptr();
  hold();
  for (auto* c : {&moved, &copied}) c->select(index({0, 4, 2, 3}));  // row 1 leaves, row 4 takes its place
  EXPECT_EQ(moved.layers[0].cross_k.data_ptr() == cross_before, cpu) << "rows moved within the tensor";
  EXPECT_EQ(moved.layers[0].cross_k.size(0), 4);
  step({3, 10, 12, 7}, "a row left");
  hold();
  for (auto* c : {&moved, &copied}) c->select(index({1, 2}));  // ascending: both move
  step({9, 4}, "rows left in order");
  hold();
  for (auto* c : {&moved, &copied}) c->append(fresh(index({23, 24, 25, 0, 0}).view({1, 5})));
  step({5, 6, 2}, "a row joined");
  step({8, 3, 14}, "after the join");
  const auto* joined_cross = moved.layers[0].cross_k.data_ptr();
  const auto* joined_self = moved.layers[0].self_k.data_ptr();
  hold();
  for (auto* c : {&moved, &copied}) c->append(fresh(index({26, 27, 28, 29, 30, 31, 0}).view({1, 7})));  // longer source
  EXPECT_EQ(moved.layers[0].cross_k.data_ptr() == joined_cross, cpu) << "joined into the room the first join made";
  EXPECT_EQ(moved.layers[0].self_k.data_ptr() == joined_self, cpu);
  EXPECT_EQ(moved.src_mask.size(3), 6);
  step({5, 9, 3, 2}, "a second row joined");
  step({6, 2, 8, 12}, "after the second join");
  hold();
  for (auto* c : {&moved, &copied}) c->select(index({2, 0}));  // row 1 takes row 0: not in place, copies
  step({4, 4}, "reordered");
  // A copy of the cache shares every tensor: neither may write into or move what the other
  // holds. Each steps with its own tokens; `moved` must go on as `copied` does.
  DecoderCache twin = moved;
  auto same = [&](std::vector<int64_t> tokens, const std::string& phase) {
    auto a = model->decode_step(index(tokens), moved), b = model->decode_step(index(tokens), copied);
    EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-6)) << phase;
  };
  (void)model->decode_step(index({7, 7}), twin);
  same({7, 7}, "beside a copy");
  same({9, 1}, "beside a copy, second step");
  (void)model->decode_step(index({3, 5}), twin);
  twin.select(index({1}));
  (void)model->decode_step(index({6}), twin);
  same({4, 4}, "after the copy stepped and dropped a row");
}

TEST_P(TransformerOnDevice, MasksLiveOnTheInputDevice) {
  auto src = tokens({{5, 0}});
  EXPECT_EQ(make_padding_mask(src, 0).device(), device);
  EXPECT_EQ(make_target_mask(src, 0).device(), device);
  EXPECT_EQ(make_target_mask(src, 0).sizes(), torch::IntArrayRef({1, 1, 2, 2}));
}

INSTANTIATE_TEST_SUITE_P(Devices, TransformerOnDevice,
                         ::testing::Combine(::testing::Values("cpu", "cuda"),
                                            ::testing::Values("paper", "pre_ln", "rope", "learned", "gqa", "mqa",
                                                              "modern", "moe")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// RoPE: attention scores depend only on relative positions. Queries and keys rotated at
// positions shifted by the same k give the same scores.
TEST(Rotary, ScoresDependOnlyOnRelativePositions) {
  ModelConfig c = variant_config("rope");
  PositionalEncoding positions(
      PositionalEncodingOptions(c.d_model, 64).kind(Positions::kRope).head_dim(c.d_model / c.num_heads));
  const int64_t d = c.d_model / c.num_heads;
  torch::manual_seed(2);
  auto q = torch::randn({1, 2, 5, d});  // [B, H, T, d_k]
  auto k = torch::randn({1, 2, 5, d});
  auto scores_at = [&](int64_t offset) {
    auto [cos, sin] = positions->rotary(offset, 5, torch::kFloat);
    auto [qr, kr] = apply_rotary_pos_emb(q, k, sin, cos);
    return torch::matmul(qr, kr.transpose(-2, -1));  // [B, H, T, T]
  };
  const auto at0 = scores_at(0);
  for (int64_t shift : {1, 7, 40})
    EXPECT_TRUE(torch::allclose(at0, scores_at(shift), 1e-4, 1e-4)) << "shift " << shift;
  // Not trivially: unrotated scores differ, and rotation by different offsets for q and k too.
  EXPECT_FALSE(torch::allclose(at0, torch::matmul(q, k.transpose(-2, -1)), 1e-3, 1e-3));
  auto [c0, s0] = positions->rotary(0, 5, torch::kFloat);
  auto [c3, s3] = positions->rotary(3, 5, torch::kFloat);
  auto mixed = torch::matmul(q * c0 + rotate_half(q) * s0, (k * c3 + rotate_half(k) * s3).transpose(-2, -1));
  EXPECT_FALSE(torch::allclose(at0, mixed, 1e-3, 1e-3));
  // rotate_half as the reference: [x1, x2] -> [-x2, x1].
  EXPECT_TRUE(torch::equal(rotate_half(torch::tensor({1.0f, 2.0f, 3.0f, 4.0f})), torch::tensor({-3.0f, -4.0f, 1.0f, 2.0f})));
}

// GQA with G K/V heads is multi-head attention whose K/V projections repeat each group's
// rows for the H / G query heads that share it; kv_heads == heads is multi-head attention.
TEST(GroupedQueryAttention, EqualsMultiHeadAttentionWithRepeatedKeyValueHeads) {
  torch::NoGradGuard no_grad;
  const int64_t d = 32, heads = 4, groups = 2, hd = d / heads;
  torch::manual_seed(4);
  MultiHeadAttention gqa(MultiHeadAttentionOptions(d, heads).dropout(0.0).kv_heads(groups));
  MultiHeadAttention mha(MultiHeadAttentionOptions(d, heads).dropout(0.0));
  gqa->eval();
  mha->eval();
  EXPECT_TRUE(gqa->named_parameters().contains("q_proj.weight"));
  EXPECT_TRUE(mha->named_parameters().contains("W_q.weight"));
  EXPECT_EQ(gqa->W_k->weight.sizes(), torch::IntArrayRef({groups * hd, d}));
  auto repeat_rows = [&](const torch::Tensor& w) {  // [G*d_k, ...] -> [H*d_k, ...]
    auto shape = w.sizes().vec();
    auto grouped = w.reshape({groups, 1, hd, -1}).expand({groups, heads / groups, hd, w.numel() / (groups * hd)});
    shape[0] = heads * hd;
    return grouped.reshape(shape);
  };
  mha->W_q->weight.copy_(gqa->W_q->weight);
  mha->W_q->bias.copy_(gqa->W_q->bias);
  mha->W_o->weight.copy_(gqa->W_o->weight);
  mha->W_o->bias.copy_(gqa->W_o->bias);
  mha->W_k->weight.copy_(repeat_rows(gqa->W_k->weight));
  mha->W_k->bias.copy_(repeat_rows(gqa->W_k->bias));
  mha->W_v->weight.copy_(repeat_rows(gqa->W_v->weight));
  mha->W_v->bias.copy_(repeat_rows(gqa->W_v->bias));
  auto x = torch::randn({2, 5, d});
  auto memory = torch::randn({2, 7, d});
  auto mask = torch::ones({2, 1, 1, 7}, torch::kBool);
  mask.index_put_({1, 0, 0, torch::indexing::Slice(4)}, false);
  for (auto kernel : {AttentionKernel::kExplicit, AttentionKernel::kFused}) {
    set_attention_kernel(kernel);
    EXPECT_TRUE(torch::allclose(gqa(x, memory, memory, mask), mha(x, memory, memory, mask), 1e-5, 1e-5));
  }
  set_attention_kernel(AttentionKernel::kAuto);
  auto [out_g, w_g] = gqa->forward_with_weights(x, memory, memory, mask);
  auto [out_m, w_m] = mha->forward_with_weights(x, memory, memory, mask);
  EXPECT_TRUE(torch::allclose(w_g, w_m, 1e-5, 1e-5));
  // One decoding query per sentence: the CPU attention kernel reads the shared heads.
  auto q1 = x.narrow(1, 0, 1);
  auto kg = gqa->split_heads(gqa->W_k, memory), vg = gqa->split_heads(gqa->W_v, memory);  // [B, G, S, d_k]
  EXPECT_EQ(kg.size(1), groups);
  auto step = gqa->attend(gqa->split_heads(gqa->W_q, q1), kg, vg, mask);
  EXPECT_TRUE(torch::allclose(step, mha(q1, memory, memory, mask), 1e-5, 1e-5));
}

// Training projects self-attention's Q, K, V (cross-attention's K, V) as one GEMM over the
// concatenated weights: the same outputs and the same gradients, per parameter, as one
// projection at a time (eval mode with gradients on; dropout 0 makes the two modes one function).
TEST(MultiHeadAttention, ProjectionsAsOneGemmInTrainingEqualOneAtATime) {
  const int64_t d = 32, heads = 4;
  for (const int64_t groups : {heads, int64_t{2}}) {
    torch::manual_seed(7);
    MultiHeadAttention attn(MultiHeadAttentionOptions(d, heads).dropout(0.0).kv_heads(groups));
    auto x = torch::randn({2, 5, d});
    auto memory = torch::randn({2, 7, d});
    auto mask = torch::ones({2, 1, 1, 7}, torch::kBool);
    mask.index_put_({1, 0, 0, torch::indexing::Slice(4)}, false);
    auto run = [&](bool training, bool self) {
      attn->train(training);
      attn->zero_grad();
      auto out = self ? attn(x, x, x) : attn(x, memory, memory, mask);
      (out * out).sum().backward();
      std::map<std::string, torch::Tensor> grads;
      for (const auto& p : attn->named_parameters()) grads[p.key()] = p.value().grad().clone();
      return std::make_pair(out.detach(), grads);
    };
    for (const bool self : {true, false}) {
      const auto [out_t, grads_t] = run(/*training=*/true, self);
      const auto [out_e, grads_e] = run(/*training=*/false, self);
      EXPECT_TRUE(torch::allclose(out_t, out_e, 1e-5, 1e-5)) << "groups " << groups << " self " << self;
      ASSERT_EQ(grads_t.size(), 8u);
      for (const auto& [name, g] : grads_t) {
        EXPECT_GT(g.abs().max().item<float>(), 0.f) << name;
        EXPECT_TRUE(torch::allclose(g, grads_e.at(name), 1e-4, 1e-5)) << name << " groups " << groups << " self " << self;
      }
    }
  }
}

// MoE: each token goes to exactly top_k experts, and the dispatched computation equals the
// dense one (every expert on every token, weighted by the gate where chosen).
TEST(MixtureOfExperts, EachTokenGoesToTopKExpertsAndDispatchEqualsDenseComputation) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const int64_t d = 16, experts = 5, k = 2;
  MoELayer moe(MoELayerOptions(d, 24, experts).top_k(k).dropout(0.0));
  moe->eval();
  auto x = torch::randn({3, 6, d});
  auto out = moe(x);
  int64_t routed = 0;
  for (int64_t n : moe->tokens_per_expert) routed += n;
  EXPECT_EQ(routed, 3 * 6 * k);  // every token to exactly k experts
  int64_t used = 0;
  for (int64_t n : moe->tokens_per_expert) used += n > 0;
  EXPECT_GT(used, k);  // the routing spreads: not the same k experts for every token

  auto flat = x.reshape({-1, d});
  auto probs = torch::softmax(moe->gate(flat), -1);  // [N, E]
  auto [w, chosen] = probs.topk(k, -1);
  auto expected = torch::zeros_like(flat);
  for (int64_t e = 0; e < experts; ++e) {
    auto y = moe->experts[e]->as<FeedForward>()->forward(flat);                 // every token
    auto weight = (chosen == e).to(torch::kFloat).mul(w).sum(-1, true);        // [N, 1], 0 where not chosen
    expected += y * weight;
  }
  EXPECT_TRUE(torch::allclose(out.reshape({-1, d}), expected, 1e-5, 1e-5));

  // The load-balancing loss by hand: E * sum_e (share of assignments to e) * (mean prob of e).
  auto share = torch::zeros({experts});
  for (int64_t e = 0; e < experts; ++e) share[e] = (chosen == e).sum().item<double>() / (chosen.numel());
  const double by_hand = experts * (share * probs.mean(0)).sum().item<double>();
  EXPECT_NEAR(moe->aux_loss.item<double>(), by_hand, 1e-6);
}

// One expert with top_k 1 is the dense feed-forward network with the same weights.
TEST(MixtureOfExperts, OneExpertTopOneEqualsTheDenseFeedForward) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  MoELayer moe(MoELayerOptions(16, 24, 1).top_k(1).dropout(0.0));
  FeedForward dense(FeedForwardOptions(16, 24).dropout(0.0));
  moe->eval();
  dense->eval();
  auto expert = moe->experts[0]->as<FeedForward>();
  dense->linear1->weight.copy_(expert->linear1->weight);
  dense->linear1->bias.copy_(expert->linear1->bias);
  dense->linear2->weight.copy_(expert->linear2->weight);
  dense->linear2->bias.copy_(expert->linear2->bias);
  auto x = torch::randn({2, 5, 16});
  EXPECT_TRUE(torch::allclose(moe(x), dense(x), 1e-6, 1e-6));
  EXPECT_NEAR(moe->aux_loss.item<double>(), 1.0, 1e-6);  // one expert: f = P = 1
  EXPECT_THROW(MoELayer(MoELayerOptions(16, 24, 2).top_k(3)), std::invalid_argument);
}

// Activation checkpointing: the same loss and gradients as without (dropout on: the
// recomputation replays the random state), and a graph that keeps one node per layer instead
// of the layer's intermediates.
TEST(ActivationCheckpointing, SameGradientsAndAGraphWithoutTheLayersIntermediates) {
  auto src = torch::tensor({5, 6, 7, 0, 8, 9, 10, 11}, torch::kLong).view({2, 4});
  auto tgt = torch::tensor({2, 10, 0, 2, 14, 15}, torch::kLong).view({2, 3});
  for (const std::string variant : {"paper", "modern", "moe"}) {
    SCOPED_TRACE(variant);
    auto run = [&](bool recompute, int64_t* nodes) {
      ModelConfig c = variant_config(variant);
      c.dropout = 0.1;
      c.checkpoint_activations = recompute;
      torch::manual_seed(21);
      Transformer model(c);
      model->train();
      torch::manual_seed(22);
      auto loss = model->forward(src, tgt).pow(2).mean();
      // A mixture's load-balancing loss leaves the recomputed layer as a second output and
      // trains the gates like the plain model's (a detached one would change their gradient).
      if (auto aux = model->moe_aux_loss(); aux.defined()) {
        EXPECT_TRUE(aux.requires_grad());
        loss = loss + 0.5 * aux;
      }
      // Nodes of the autograd graph (what backward will read; each keeps its saved tensors).
      std::set<torch::autograd::Node*> seen;
      std::vector<torch::autograd::Node*> stack{loss.grad_fn().get()};
      while (!stack.empty()) {
        auto* node = stack.back();
        stack.pop_back();
        if (!node || !seen.insert(node).second) continue;
        for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
      }
      *nodes = static_cast<int64_t>(seen.size());
      loss.backward();
      std::map<std::string, torch::Tensor> grads;
      for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().defined() ? p.value().grad() : torch::zeros_like(p.value());
      return std::make_pair(loss.item<double>(), grads);
    };
    int64_t nodes_plain = 0, nodes_recomputed = 0;
    auto [loss_plain, grads_plain] = run(false, &nodes_plain);
    auto [loss_recomputed, grads_recomputed] = run(true, &nodes_recomputed);
    // The checkpointed forward runs without gradient mode, where some kernels round differently.
    EXPECT_NEAR(loss_recomputed, loss_plain, 1e-6 * std::abs(loss_plain));
    for (const auto& [key, g] : grads_plain)
      EXPECT_TRUE(torch::allclose(grads_recomputed.at(key), g, 1e-6, 1e-6))
          << key << " " << (grads_recomputed.at(key) - g).abs().max().item<double>();
    EXPECT_LT(nodes_recomputed * 3, nodes_plain) << nodes_recomputed << " vs " << nodes_plain;
  }
}

// Training under CPU bf16 autocast keeps the residual stream in bf16 (no fp32 stream cast at
// every sublayer) and still trains every parameter in fp32, near the fp32 model's loss;
// inference under autocast keeps its fp32 stream (its numerics are unchanged).
TEST(Transformer, CpuAutocastTrainsWithItsResidualStreamInTheAutocastDtype) {
  auto src = torch::tensor({5, 6, 7, 0, 8, 9, 10, 11}, torch::kLong).view({2, 4});
  auto tgt = torch::tensor({2, 10, 0, 2, 14, 15}, torch::kLong).view({2, 3});
  for (const std::string variant : {"paper", "modern"}) {
    SCOPED_TRACE(variant);
    ModelConfig c = variant_config(variant);
    c.dropout = 0.0;
    torch::manual_seed(23);
    Transformer model(c);
    const auto src_mask = make_padding_mask(src, c.pad_id);
    double fp32_loss = 0;
    {
      model->train();
      fp32_loss = model->forward(src, tgt).pow(2).mean().item<double>();
    }
    AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
    model->eval();
    {
      torch::NoGradGuard no_grad;
      EXPECT_EQ(model->encode(src, src_mask).scalar_type(), torch::kFloat);
    }
    model->train();
    EXPECT_EQ(model->encode(src, src_mask).scalar_type(), torch::kBFloat16);
    auto loss = model->forward(src, tgt).to(torch::kFloat).pow(2).mean();
    EXPECT_NEAR(loss.item<double>(), fp32_loss, 0.03 * std::abs(fp32_loss));
    loss.backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_EQ(p.value().grad().scalar_type(), torch::kFloat) << p.key();
      EXPECT_TRUE(p.value().grad().isfinite().all().item<bool>()) << p.key();
    }
  }
}

// The KV cache of a decoding model holds kv_heads heads: its bytes shrink by heads / kv_heads.
TEST(GroupedQueryAttention, KeyValueCacheShrinksByHeadsOverKvHeads) {
  torch::NoGradGuard no_grad;
  auto cache_bytes = [](const ModelConfig& c) {
    torch::manual_seed(1);
    Transformer model(c);
    model->eval();
    auto src = torch::randint(3, c.src_vocab_size, {3, 9});
    auto src_mask = make_padding_mask(src, c.pad_id);
    DecoderCache cache = model->start_cache(model->encode(src, src_mask), src_mask);
    auto last = torch::full({3}, 1, torch::kLong);
    for (int t = 0; t < 4; ++t) model->decode_step(last, cache);
    int64_t bytes = 0;
    for (const auto& l : cache.layers)
      for (const auto* t : {&l.self_k, &l.self_v, &l.cross_k, &l.cross_v}) bytes += t->numel() * t->element_size();
    return bytes;
  };
  const ModelConfig mha = variant_config("paper");
  const int64_t full = cache_bytes(mha);
  for (int64_t kv : {2, 1}) {
    ModelConfig c = mha;
    c.kv_heads = kv;
    EXPECT_EQ(cache_bytes(c) * (mha.num_heads / kv), full) << "kv_heads " << kv;
  }
}

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

// A closed output column has zero probability in the whole layer's softmax, and the softmax over
// the open columns alone (forward_columns) is the whole layer's on them; opening it again gives
// it bias 0.
TEST(Transformer, ClosedOutputColumnsHaveZeroProbabilityAndTheOpenOnesTheirOwnSoftmax) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelConfig c = small_test_config();
    c.dropout = 0.0;
    if (tied) c.tgt_vocab_size = c.src_vocab_size;
    c.tie_embeddings = tied;
    torch::manual_seed(5);
    Transformer model(c);
    model->eval();
    torch::NoGradGuard no_grad;
    model->fc_out->bias.uniform_(-1, 1);  // not the fresh zeros, so that reopening shows
    EXPECT_TRUE(model->open_output_columns().all().item<bool>());
    at::Tensor open = torch::rand({c.tgt_vocab_size}).lt(0.5);
    open[c.pad_id] = true;
    model->close_output_columns(open);
    EXPECT_TRUE(torch::equal(model->open_output_columns(), open));

    auto src = torch::randint(4, c.src_vocab_size, {2, 6});
    auto tgt = torch::randint(4, c.tgt_vocab_size, {2, 5});
    const at::Tensor full = torch::log_softmax(model->forward(src, tgt), -1);  // [B, T, V]
    EXPECT_TRUE(full.index({"...", open.logical_not()}).exp().eq(0).all().item<bool>());
    const at::Tensor columns = open.nonzero().flatten();
    const at::Tensor part = torch::log_softmax(model->forward_columns(src, tgt, columns), -1);  // [B, T, C]
    EXPECT_TRUE(torch::allclose(part, full.index_select(-1, columns), 1e-5, 1e-5));

    const at::Tensor bias_before = model->fc_out->bias.clone();
    model->close_output_columns(torch::ones({c.tgt_vocab_size}, torch::kBool));
    EXPECT_TRUE(model->open_output_columns().all().item<bool>());
    EXPECT_TRUE(model->fc_out->bias.index({open.logical_not()}).eq(0).all().item<bool>());
    EXPECT_TRUE(torch::equal(model->fc_out->bias.index({open}), bias_before.index({open})));
  }
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
  // paper-* are today's presets; modern-* the same sizes with Pre-LN, RoPE and GQA.
  EXPECT_EQ(ModelConfig::preset("paper-small").to_json(), ModelConfig::preset("small").to_json());
  EXPECT_EQ(ModelConfig::preset("paper-base").to_json(), base.to_json());
  auto modern = ModelConfig::preset("modern-base");
  EXPECT_EQ(modern.norm, Norm::kPre);
  EXPECT_EQ(modern.positions, Positions::kRope);
  EXPECT_EQ(modern.key_value_heads(), 4);
  EXPECT_EQ(modern.d_model, base.d_model);
  EXPECT_EQ(ModelConfig::from_json(modern.to_json()).to_json(), modern.to_json());
  EXPECT_THROW(ModelConfig::preset("modern-big"), std::invalid_argument);
  // A configuration written before these switches existed reads as the paper's model.
  std::string old;
  {
    std::istringstream lines(ModelConfig::preset("small").to_json());  // one key per line, none of these last
    for (std::string line; std::getline(lines, line);)
      if (line.find("\"norm\"") == std::string::npos && line.find("\"positions\"") == std::string::npos &&
          line.find("\"kv_heads\"") == std::string::npos)
        old += line + "\n";
  }
  ASSERT_EQ(old.find("norm"), std::string::npos) << old;
  EXPECT_EQ(ModelConfig::from_json(old).to_json(), ModelConfig::preset("small").to_json()) << old;
  auto bad_kv = base;
  bad_kv.kv_heads = 3;
  EXPECT_THROW(bad_kv.validate(), std::invalid_argument);
  auto bad = base;
  bad.num_heads = 7;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

// A field of the model configuration is a size (or an id, or training-only), or a switch that some
// model variant changes: the exporters' tests run every variant (tests/export_test.cpp), so a new
// switch without a variant fails here, and with one fails there until every exporter handles it.
TEST(ModelConfig, EverySwitchHasAVariantThatEveryExporterRuns) {
  const std::set<std::string> sizes = {"src_vocab_size", "tgt_vocab_size", "d_model", "num_heads",
                                       "num_encoder_layers", "num_decoder_layers", "d_ff", "dropout",
                                       "max_positions", "pad_id", "unk_id", "bos_id", "eos_id", "experts", "top_k",
                                       "checkpoint_activations"};
  ModelConfig base = ModelConfig::preset("tiny");
  const auto variants = model_variants(base);
  const auto fields = nlohmann::json::parse(base.to_json());
  std::set<std::string> names;
  for (const auto& v : variants) {
    EXPECT_NO_THROW(v.config.validate()) << v.name;
    EXPECT_TRUE(names.insert(v.name).second) << "two variants named " << v.name;
  }
  for (const auto& [key, value] : fields.items()) {
    if (sizes.count(key)) continue;
    bool varied = false;
    for (const auto& v : variants) varied = varied || nlohmann::json::parse(v.config.to_json()).at(key) != value;
    EXPECT_TRUE(varied) << "the model configuration's '" << key << "' is neither a size nor changed by a variant "
                        << "(model_variants in src/model/model_config.cpp)";
  }
  // Every named value of every switch is a variant of its own.
  for (const std::string name : {"activation=gelu", "activation=swish", "norm=pre", "positions=learned",
                                 "positions=rope", "ffn=moe", "kv_heads=1", "modern"})
    EXPECT_TRUE(names.count(name)) << name;
  EXPECT_EQ(parse_positions("rope"), Positions::kRope);
  EXPECT_EQ(activation_name(Activation::kSwish), "swish");
  try {
    parse_positions("alibi");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "positions must be sinusoidal, learned or rope, got 'alibi'");
  }
}

}  // namespace
}  // namespace torchmt
