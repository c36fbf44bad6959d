#include "export/onnx_exporter.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "onnx_graph.h"
#include "torchmt/decoding/translation_options.h"
#include "io/checkpoint.h"
#include "util/atomic_file.h"

namespace torchmt {
namespace {

using Type = OnnxGraph::Type;
using Ints = std::vector<int64_t>;

// A tensor as an initializer of `g`.
std::string add_weight(OnnxGraph& g, const std::string& name, const at::Tensor& value) {
  const auto t = value.detach().cpu().contiguous();
  Type type;
  switch (t.scalar_type()) {
    case at::kFloat: type = Type::kFloat; break;
    case at::kLong: type = Type::kInt64; break;
    case at::kChar: type = Type::kInt8; break;
    case at::kBool: type = Type::kBool; break;
    default: throw std::invalid_argument("ONNX export: no initializer type for " + name);
  }
  return g.weight(name, type, t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
}

// Emits torchmt's modules as ONNX nodes into one graph. Activations are [B, T, D] throughout;
// every Linear is MatMul with the transposed weight + Add (the fp32 output projection excepted:
// projection()).
class Emitter {
 public:
  // names: tensor -> its state-dict name (a tied tensor's first); layers: Linear -> its module path.
  Emitter(OnnxGraph& g, const ModelConfig& c, const std::map<const void*, std::string>& names,
          const std::map<const void*, std::string>& layers, const ExportOptions& options)
      : g_(g), c_(c), names_(names), layers_(layers), options_(options), d_k_(c.d_model / c.num_heads) {}

  // Initializer for a parameter or buffer, under its state-dict name (+ suffix), once.
  std::string param(const at::Tensor& t, const std::string& suffix = "",
                    const std::function<at::Tensor(const at::Tensor&)>& transform = nullptr) {
    const auto it = names_.find(t.unsafeGetTensorImpl());
    if (it == names_.end()) throw std::logic_error("ONNX export: a tensor without a state-dict name");
    const std::string name = it->second + suffix;
    if (written_.insert(name).second) add_weight(g_, name, transform ? transform(t.detach()) : t.detach().to(torch::kFloat));
    return name;
  }

  // y = x W^T + b; static int8 (activation_ranges) puts Q/DQ pairs on the input and the weight.
  std::string linear(const std::string& x, const torch::nn::Linear& l) {
    std::string input = x, weight;
    if (const auto scale = activation_scale(l); scale > 0) {
      input = fake_quantize(x, scale);
      weight = int8_weight(l->weight);
    } else {
      weight = param(l->weight, ".T", [](const at::Tensor& w) { return w.to(torch::kFloat).t().contiguous(); });
    }
    auto y = g_.node("MatMul", {input, weight});
    return l->bias.defined() ? g_.node("Add", {y, param(l->bias)}) : y;
  }

  // x [B, 1, D] -> [B, V] = x W^T + b. fp32: Gemm with transB reads the weight as stored [V, D], so a
  // tied embedding is stored once; static int8: the 3-D MatMul form, which ONNX Runtime fuses into
  // one integer kernel (on 2-D inputs it first makes MatMul + Add a Gemm, whose weight it then
  // dequantizes at every call).
  std::string projection(const std::string& x, const torch::nn::Linear& l, const std::string& output) {
    const auto rows = g_.ints({-1, l->weight.size(activation_scale(l) > 0 ? 0 : 1)});
    if (activation_scale(l) > 0) return g_.node("Reshape", {linear(x, l), rows}, {}, output);  // [B, V]
    const auto hidden = g_.node("Reshape", {x, rows});  // [B, D]
    return g_.node("Gemm", {hidden, param(l->weight), param(l->bias)}, {{"transB", int64_t{1}}}, output);
  }

  std::string layer_norm(const std::string& x, const torch::nn::LayerNorm& norm) {
    return g_.node("LayerNormalization", {x, param(norm->weight), param(norm->bias)},
                   {{"axis", int64_t{-1}}, {"epsilon", static_cast<float>(norm->options.eps())}});
  }

  std::string add(const std::string& a, const std::string& b) { return g_.node("Add", {a, b}); }

  // [B, T, n * d_k] -> [B, n, T, d_k]
  std::string split_heads(const std::string& x, int64_t heads) {
    auto r = g_.node("Reshape", {x, g_.ints({0, 0, heads, d_k_})});  // [B, T, n, d_k]
    return g_.node("Transpose", {r}, {{"perm", Ints{0, 2, 1, 3}}});  // [B, n, T, d_k]
  }

  // rotate_half's layout: x cos + [-x2, x1] sin, cos/sin [T, d_k] broadcast over [B, n, T, d_k].
  std::string rotary(const std::string& x, const std::string& cos, const std::string& sin) {
    const auto halves = g_.nodes("Split", {x, g_.ints({d_k_ / 2, d_k_ / 2})}, 2, {{"axis", int64_t{-1}}});
    const auto rotated = g_.node("Concat", {g_.node("Neg", {halves[1]}), halves[0]}, {{"axis", int64_t{-1}}});
    return add(g_.node("Mul", {x, cos}), g_.node("Mul", {rotated, sin}));
  }

  // softmax(q k^T / sqrt(d_k)) v with q [B, H, Tq, d_k], k/v [B, G, Tk, d_k], mask [B, 1, 1, Tk]
  // bool (or none) -> [B, Tq, D]. Grouped heads: the H/G query heads of a K/V head are one
  // matrix of H/G * Tq rows, as MultiHeadAttention::attend_explicit does.
  std::string attention(const std::string& q, const std::string& k, const std::string& v, const std::string& mask) {
    const int64_t heads = c_.num_heads, groups = c_.key_value_heads();
    const auto kt = g_.node("Transpose", {k}, {{"perm", Ints{0, 1, 3, 2}}});  // [B, G, d_k, Tk]
    std::string scores;
    if (heads == groups) {
      scores = g_.node("MatMul", {q, kt});  // [B, H, Tq, Tk]
    } else {
      const auto grouped = g_.node("Reshape", {q, g_.ints({0, groups, -1, d_k_})});  // [B, G, H/G*Tq, d_k]
      scores = g_.node("Reshape", {g_.node("MatMul", {grouped, kt}), g_.ints({0, heads, -1, 0})});  // [B, H, Tq, Tk]
    }
    scores = g_.node("Div", {scores, g_.scalar(static_cast<float>(std::sqrt(static_cast<double>(d_k_))))});
    if (!mask.empty())
      scores = g_.node("Where", {mask, scores, g_.scalar(-std::numeric_limits<float>::infinity())});
    auto weights = g_.node("Softmax", {scores}, {{"axis", int64_t{-1}}});
    std::string out;
    if (heads == groups) {
      out = g_.node("MatMul", {weights, v});  // [B, H, Tq, d_k]
    } else {
      const auto grouped = g_.node("Reshape", {weights, g_.ints({0, groups, -1, 0})});  // [B, G, H/G*Tq, Tk]
      out = g_.node("Reshape", {g_.node("MatMul", {grouped, v}), g_.ints({0, heads, -1, 0})});  // [B, H, Tq, d_k]
    }
    const auto merged = g_.node("Transpose", {out}, {{"perm", Ints{0, 2, 1, 3}}});  // [B, Tq, H, d_k]
    return g_.node("Reshape", {merged, g_.ints({0, 0, c_.d_model})});               // [B, Tq, D]
  }

  std::string activation(const std::string& h) {
    switch (c_.activation) {
      case Activation::kGELU: {  // the exact (erf) GELU, as torch::gelu's default
        const auto erf = g_.node("Erf", {g_.node("Div", {h, g_.scalar(static_cast<float>(std::sqrt(2.0)))})});
        return g_.node("Mul", {g_.node("Mul", {h, g_.node("Add", {erf, g_.scalar(1.0f)})}), g_.scalar(0.5f)});
      }
      case Activation::kSwish: return g_.node("Mul", {h, g_.node("Sigmoid", {h})});
      case Activation::kReLU: break;
    }
    return g_.node("Relu", {h});
  }

  std::string feed_forward(const std::string& x, FeedForwardImpl& ffn) {
    return linear(activation(linear(x, ffn.linear1)), ffn.linear2);
  }

  // Every expert on every token, weighted by the top-k gate probabilities (zero elsewhere): the
  // sum MoELayer forms over the tokens routed to each expert.
  std::string mixture(const std::string& x, MoELayer& moe) {
    const int64_t experts = static_cast<int64_t>(moe->experts->size());
    const auto probs = g_.node("Softmax", {linear(x, moe->gate)}, {{"axis", int64_t{-1}}});  // [B, T, E]
    const auto top = g_.nodes("TopK", {probs, g_.ints({moe->top_k})}, 2, {{"axis", int64_t{-1}}});  // [B, T, k]
    const auto zeros = g_.node("Mul", {probs, g_.scalar(0.0f)});
    const auto gate = g_.node("ScatterElements", {zeros, top[1], top[0]}, {{"axis", int64_t{-1}}});  // [B, T, E]
    std::string out;
    for (int64_t e = 0; e < experts; ++e) {
      auto* expert = moe->experts[e]->as<FeedForward>();
      const auto weight = g_.node("Slice", {gate, g_.ints({e}), g_.ints({e + 1}), g_.ints({-1})});  // [B, T, 1]
      const auto y = g_.node("Mul", {feed_forward(x, *expert), weight});
      out = out.empty() ? y : add(out, y);
    }
    return out;
  }

  std::string ffn(const std::string& x, FeedForwardSlot& slot) {
    return slot.moe ? mixture(x, slot.moe) : feed_forward(x, *slot.dense);
  }

  // Token embedding (scaled) plus the position table's rows [start, end) (1-D int64 tensors).
  std::string embed(const std::string& ids, const torch::nn::Embedding& table, PositionalEncoding& positions,
                    const std::string& start, const std::string& end) {
    auto x = g_.node("Gather", {param(table->weight), ids});  // [B, T, D]
    if (c_.scale_embeddings)
      x = g_.node("Mul", {x, g_.scalar(static_cast<float>(std::sqrt(static_cast<double>(c_.d_model))))});
    if (c_.positions == Positions::kRope) return x;
    const auto table_2d = param(positions->pe, "", [](const at::Tensor& pe) { return pe.squeeze(0).to(torch::kFloat); });
    return add(x, g_.node("Slice", {table_2d, start, end, g_.ints({0})}));  // + [T, D]
  }

  // Rotary tables' rows [start, end): (cos, sin) [T, d_k]; empty without rotary positions.
  std::pair<std::string, std::string> rotary_tables(PositionalEncoding& positions, const std::string& start,
                                                    const std::string& end) {
    if (c_.positions != Positions::kRope) return {};
    return {g_.node("Slice", {param(positions->cos), start, end, g_.ints({0})}),
            g_.node("Slice", {param(positions->sin), start, end, g_.ints({0})})};
  }

  std::string self_attention(const std::string& x, MultiHeadAttention& a,
                             const std::pair<std::string, std::string>& rotary_cos_sin, const std::string& mask,
                             const std::string& past_key = "", const std::string& past_value = "",
                             const std::string& present_key = "", const std::string& present_value = "") {
    auto q = split_heads(linear(x, a->W_q), c_.num_heads);           // [B, H, T, d_k]
    auto k = split_heads(linear(x, a->W_k), c_.key_value_heads());   // [B, G, T, d_k]
    auto v = split_heads(linear(x, a->W_v), c_.key_value_heads());   // [B, G, T, d_k]
    if (!rotary_cos_sin.first.empty()) {
      q = rotary(q, rotary_cos_sin.first, rotary_cos_sin.second);
      k = rotary(k, rotary_cos_sin.first, rotary_cos_sin.second);
    }
    if (!past_key.empty()) {  // the step's key/value appended to the cache: [B, G, past + 1, d_k]
      k = g_.node("Concat", {past_key, k}, {{"axis", int64_t{2}}}, present_key);
      v = g_.node("Concat", {past_value, v}, {{"axis", int64_t{2}}}, present_value);
    }
    return linear(attention(q, k, v, mask), a->W_o);
  }

  std::string fake_quantize(const std::string& x, float scale) {
    const auto s = g_.scalar(scale);
    const auto zero = add_weight(g_, fresh_name("zero_point"), torch::zeros({}, torch::kChar));
    return g_.node("DequantizeLinear", {g_.node("QuantizeLinear", {x, s, zero}), s, zero});
  }

 private:
  float activation_scale(const torch::nn::Linear& l) const {
    // Symmetric int8 over the calibrated range (zero point 0), as ONNX Runtime's MinMax calibration.
    const auto layer = layers_.find(static_cast<const torch::nn::Module*>(l.get()));
    if (layer == layers_.end()) return 0.0f;
    const auto it = options_.activation_ranges.find(layer->second + ".weight");
    return it == options_.activation_ranges.end() || it->second.amax <= 0 ? 0.0f : it->second.amax / 127.0f;
  }

  // The weight as int8 with one scale per output channel and the DequantizeLinear that reads it,
  // [in, out] (axis 1) for MatMul. 63 steps a side (ONNX Runtime's
  // reduce_range): on x86 without VNNI its u8 x s8 kernels (vpmaddubsw) sum pairs in int16, which
  // full 127-step weights saturate.
  std::string int8_weight(const at::Tensor& w) {
    const std::string base = names_.at(w.unsafeGetTensorImpl()) + ".T";
    const std::string q_name = base + ".int8", s_name = base + ".scale";
    if (written_.insert(q_name).second) {
      constexpr float kSteps = 63.f;
      const auto wf = w.detach().to(torch::kFloat);  // [out, in]
      const auto amax = wf.abs().amax(1).clamp_min(1e-30f);  // [out]
      const auto scale = amax / kSteps;
      const auto q = (wf / scale.unsqueeze(1)).round().clamp(-kSteps, kSteps).to(torch::kChar);
      add_weight(g_, q_name, q.t().contiguous());
      add_weight(g_, s_name, scale);
      add_weight(g_, base + ".zero", torch::zeros({w.size(0)}, torch::kChar));
    }
    return g_.node("DequantizeLinear", {q_name, s_name, base + ".zero"}, {{"axis", int64_t{1}}});
  }

  std::string fresh_name(const std::string& stem) { return stem + "_" + std::to_string(fresh_++); }

  OnnxGraph& g_;
  const ModelConfig& c_;
  const std::map<const void*, std::string>& names_;
  const std::map<const void*, std::string>& layers_;
  const ExportOptions& options_;
  const int64_t d_k_;
  std::set<std::string> written_;
  int64_t fresh_ = 0;
};

std::vector<OnnxGraph::Dim> kv_dims(const ModelConfig& c, const std::string& length) {
  return {std::string("batch"), c.key_value_heads(), length, c.d_model / c.num_heads};
}

// The encoder: source ids -> source mask and every decoder layer's cross-attention keys/values.
void build_encoder(OnnxGraph& g, Transformer& model, const ModelConfig& c, Emitter& e) {
  g.input("source_ids", Type::kInt64, {std::string("batch"), std::string("source_length")});
  // true = may attend; a row of padding only (an empty source) is opened to every key, as
  // without_empty_rows does, so softmax never sees only -inf.
  auto mask = g.node("Not", {g.node("Equal", {"source_ids", g.ints({c.pad_id})})});  // [B, S]
  const auto any = g.node("ReduceMax", {g.node("Cast", {mask}, {{"to", int64_t{1}}})},
                          {{"axes", Ints{1}}, {"keepdims", int64_t{1}}});  // [B, 1]
  g.node("Or", {mask, g.node("Equal", {any, g.scalar(0.0f)})}, {}, "source_mask");
  g.output("source_mask", Type::kBool, {std::string("batch"), std::string("source_length")});
  const auto mask4 = g.node("Unsqueeze", {"source_mask", g.ints({1, 2})});  // [B, 1, 1, S]

  const auto length = g.node("Shape", {"source_ids"}, {{"start", int64_t{1}}, {"end", int64_t{2}}});  // [1]
  const auto zero = g.ints({0});
  auto x = e.embed("source_ids", model->src_embedding, model->pos_encoding, zero, length);  // [B, S, D]
  const auto rotary = e.rotary_tables(model->pos_encoding, zero, length);
  const bool pre = c.norm == Norm::kPre;
  for (auto& module : *model->encoder_layers) {
    auto layer = module->as<TransformerEncoderLayer>();
    if (pre) {
      const auto h = e.add(x, e.self_attention(e.layer_norm(x, layer->norm1), layer->self_attn, rotary, mask4));
      x = e.add(h, e.ffn(e.layer_norm(h, layer->norm2), layer->ffn));
    } else {
      const auto h = e.layer_norm(e.add(x, e.self_attention(x, layer->self_attn, rotary, mask4)), layer->norm1);
      x = e.layer_norm(e.add(h, e.ffn(h, layer->ffn)), layer->norm2);
    }
  }
  if (pre) x = e.layer_norm(x, model->encoder_norm);  // memory [B, S, D]
  for (size_t i = 0; i < model->decoder_layers->size(); ++i) {
    auto cross = model->decoder_layers[i]->as<TransformerDecoderLayer>()->cross_attn;
    const auto n = std::to_string(i);
    g.node("Identity", {e.split_heads(e.linear(x, cross->W_k), c.key_value_heads())}, {}, "cross_key_" + n);
    g.node("Identity", {e.split_heads(e.linear(x, cross->W_v), c.key_value_heads())}, {}, "cross_value_" + n);
    g.output("cross_key_" + n, Type::kFloat, kv_dims(c, "source_length"));
    g.output("cross_value_" + n, Type::kFloat, kv_dims(c, "source_length"));
  }
}

// One decoder step at position past_length for every row.
void build_decoder_step(OnnxGraph& g, Transformer& model, const ModelConfig& c, Emitter& e) {
  const int64_t layers = static_cast<int64_t>(model->decoder_layers->size());
  g.input("tokens", Type::kInt64, {std::string("batch")});
  g.input("source_mask", Type::kBool, {std::string("batch"), std::string("source_length")});
  for (int64_t i = 0; i < layers; ++i) {
    const auto n = std::to_string(i);
    g.input("past_key_" + n, Type::kFloat, kv_dims(c, "past_length"));
    g.input("past_value_" + n, Type::kFloat, kv_dims(c, "past_length"));
    g.input("cross_key_" + n, Type::kFloat, kv_dims(c, "source_length"));
    g.input("cross_value_" + n, Type::kFloat, kv_dims(c, "source_length"));
  }
  const auto mask4 = g.node("Unsqueeze", {"source_mask", g.ints({1, 2})});  // [B, 1, 1, S]
  const auto position = g.node("Shape", {"past_key_0"}, {{"start", int64_t{2}}, {"end", int64_t{3}}});  // [1]
  const auto next = g.node("Add", {position, g.ints({1})});
  const auto tokens = g.node("Unsqueeze", {"tokens", g.ints({1})});  // [B, 1]
  auto x = e.embed(tokens, model->tgt_embedding, model->pos_encoding, position, next);  // [B, 1, D]
  const auto rotary = e.rotary_tables(model->pos_encoding, position, next);
  const bool pre = c.norm == Norm::kPre;
  for (int64_t i = 0; i < layers; ++i) {
    auto layer = model->decoder_layers[i]->as<TransformerDecoderLayer>();
    const auto n = std::to_string(i);
    const auto self = [&](const std::string& in) {
      return e.self_attention(in, layer->self_attn, rotary, "", "past_key_" + n, "past_value_" + n,
                              "present_key_" + n, "present_value_" + n);
    };
    auto cross_attn = layer->cross_attn;
    const auto cross = [&](const std::string& in) {
      const auto q = e.split_heads(e.linear(in, cross_attn->W_q), c.num_heads);  // [B, H, 1, d_k]
      return e.linear(e.attention(q, "cross_key_" + n, "cross_value_" + n, mask4), cross_attn->W_o);
    };
    if (pre) {
      const auto h = e.add(x, self(e.layer_norm(x, layer->norm1)));
      const auto h2 = e.add(h, cross(e.layer_norm(h, layer->norm2)));
      x = e.add(h2, e.ffn(e.layer_norm(h2, layer->norm3), layer->ffn));
    } else {
      const auto h = e.layer_norm(e.add(x, self(x)), layer->norm1);
      const auto h2 = e.layer_norm(e.add(h, cross(h)), layer->norm2);
      x = e.layer_norm(e.add(h2, e.ffn(h2, layer->ffn)), layer->norm3);
    }
    g.output("present_key_" + n, Type::kFloat, kv_dims(c, "present_length"));
    g.output("present_value_" + n, Type::kFloat, kv_dims(c, "present_length"));
  }
  if (pre) x = e.layer_norm(x, model->decoder_norm);
  e.projection(x, model->fc_out, "logits");
  g.output("logits", Type::kFloat, {std::string("batch"), c.tgt_vocab_size});
}

bool is_onnx_directory(const std::filesystem::path& dir) {
  return std::filesystem::is_regular_file(dir / "encoder.onnx") && std::filesystem::is_regular_file(dir / "config.json");
}

}  // namespace

void OnnxExporter::check_options(const ExportOptions& options) const {
  if (options.dtype != c10::ScalarType::Float)
    throw std::invalid_argument("ONNX export writes fp32 weights, or static int8 with --calibrate FILE (drop --dtype)");
  if (options.quantize_int8 && options.activation_ranges.empty())
    throw std::invalid_argument("ONNX export's int8 is static: give --calibrate FILE (sample source sentences)");
  if (options.freeze) throw std::invalid_argument("--freeze is a TorchScript option");
}

void OnnxExporter::write(const LoadedCheckpoint& checkpoint, const ExportOptions& options, const std::string& path) {
  namespace fs = std::filesystem;
  const ModelConfig& c = checkpoint.meta.model;
  Transformer model = checkpoint.model;  // a handle: ModuleList access is non-const
  if (!model) throw std::invalid_argument("no model to export");
  check_options(options);
  if (checkpoint.meta.src_spm_model.empty())
    throw std::invalid_argument("ONNX export: the checkpoint carries no SentencePiece model");
  std::error_code ec;
  if (fs::exists(path, ec) && !(fs::is_directory(path, ec) && (fs::is_empty(path, ec) || is_onnx_directory(path))))
    throw std::runtime_error("cannot write " + path + ": exists and is not an ONNX model directory (choose another -o)");

  torch::NoGradGuard no_grad;
  std::map<const void*, std::string> names;
  for (const auto& item : model->named_parameters()) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  for (const auto& item : model->named_buffers()) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  std::map<const void*, std::string> layers;
  for (const auto& item : model->named_modules()) layers.emplace(item.value().get(), item.key());

  OnnxGraph encoder("torchmt_encoder"), decoder("torchmt_decoder_step");
  Emitter encoder_emitter(encoder, c, names, layers, options), decoder_emitter(decoder, c, names, layers, options);
  build_encoder(encoder, model, c, encoder_emitter);
  build_decoder_step(decoder, model, c, decoder_emitter);

  const bool explicit_vocabulary = !checkpoint.meta.vocabulary.empty();
  const SearchOptions search;
  nlohmann::json config = {
      {"format", "torchmt-onnx"},
      {"format_version", 1},
      {"opset", OnnxGraph::kOpset},
      {"encoder", "encoder.onnx"},
      {"decoder", "decoder.onnx"},
      {"source_spm", "source.spm"},
      {"target_spm", "target.spm"},
      {"num_decoder_layers", c.num_decoder_layers},
      {"kv_heads", c.key_value_heads()},
      {"head_dim", c.d_model / c.num_heads},
      {"max_positions", c.max_positions},
      {"pad_id", c.pad_id},
      {"unk_id", c.unk_id},
      {"bos_id", c.bos_id},
      {"eos_id", c.eos_id},
      {"quantization", options.activation_ranges.empty() ? "none" : "static-int8"},
      {"search", {{"beam_size", search.beam_size}, {"length_penalty", search.length_penalty},
                  {"max_len_a", search.max_len_a}, {"max_len_b", search.max_len_b}}},
      {"model", nlohmann::json::parse(c.to_json())},
  };
  if (explicit_vocabulary) config["vocabulary"] = "vocabulary.json";
  for (const auto& [key, value] : language_fields(checkpoint.meta)) config[key] = value;
  const std::string doc = "torchmt " + std::string(TORCHMT_VERSION) + ": see config.json";
  const auto [source, target] = checkpoint_tokenizers(checkpoint.meta);
  replace_directory(path, [&](const std::string& dir) {
    atomic_write((fs::path(dir) / "encoder.onnx").string(), encoder.serialize(TORCHMT_VERSION, doc));
    atomic_write((fs::path(dir) / "decoder.onnx").string(), decoder.serialize(TORCHMT_VERSION, doc));
    atomic_write((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
    write_sentencepiece_models(dir, source, target);
    write_language_identifier(dir, checkpoint.meta);
    if (explicit_vocabulary) atomic_write((fs::path(dir) / "vocabulary.json").string(), checkpoint.meta.vocabulary + "\n");
  });
}

}  // namespace torchmt
