#include "torchmt/model/transformer_decoder_layer.h"

#include <torch/torch.h>

#include "model/add_layer_norm.h"

namespace torchmt {

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(const TransformerLayerOptions& options_)
    : options(options_) {
  reset();
}

void TransformerDecoderLayerImpl::reset() {
  const int64_t d = options.embed_dim();
  auto attn_options =
      MultiHeadAttentionOptions(d, options.num_heads()).dropout(options.dropout()).kv_heads(options.kv_heads());
  self_attn = register_module("self_attn", MultiHeadAttention(attn_options));
  cross_attn = register_module("cross_attn", MultiHeadAttention(attn_options));
  ffn.build(*this, options);
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  norm3 = register_module("norm3", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  dropout = register_module("dropout", Dropout(options.dropout()));
}

namespace {

// The one code path of a decoder layer, for full and incremental decoding (as CTranslate2's
// and Marian's decoders have one): with a cache, x is the newest position, its K/V are
// appended to the cached self-attention K/V (the newest position may see every cached one:
// no target mask) and the cross-attention reads the K/V prepare_cache computed once.
// Post-norm: x = norm(x + sublayer(x)); Pre-LN: x = x + sublayer(norm(x)).
torch::Tensor run_layer(TransformerDecoderLayerImpl& layer, const torch::Tensor& x, const torch::Tensor& memory,
                        const torch::Tensor& src_mask, const torch::Tensor& tgt_mask, LayerKVCache* cache,
                        torch::Tensor* cross_weights, const RotaryTables& rotary, const torch::Tensor& self_mask) {
  auto& self_attn = layer.self_attn;
  auto& cross_attn = layer.cross_attn;
  const bool pre = layer.options.norm() == Norm::kPre;
  const auto in = pre ? layer_norm(layer.norm1, x) : x;
  torch::Tensor self_out;
  if (cache) {
    auto q = self_attn->split_heads(self_attn->W_q, in);  // [B, H, 1, d_k]
    auto k = self_attn->split_heads(self_attn->W_k, in);  // [B, G, 1, d_k]
    auto v = self_attn->split_heads(self_attn->W_v, in);  // [B, G, 1, d_k]
    if (rotary.defined()) std::tie(q, k) = apply_rotary_pos_emb(q, k, rotary.sin, rotary.cos);
    // The pending beam reorder (self_rows) and the new position in one copy.
    bool k_room = cache->self_room, v_room = cache->self_room;
    cache->self_k = append_positions(cache->self_k, cache->self_rows, k, &k_room);  // [B, G, t, d_k]
    cache->self_v = append_positions(cache->self_v, cache->self_rows, v, &v_room);  // [B, G, t, d_k]
    cache->self_room = k_room && v_room;
    cache->self_rows = torch::Tensor();
    // self_mask: only in a batch whose rows joined at different steps (never empty: a row
    // always sees its own new key).
    self_out = self_attn->attend(q, cache->self_k, cache->self_v, self_mask, /*mask_sanitized=*/true);
  } else {
    self_out = self_attn(in, in, in, tgt_mask, /*causal=*/true, rotary);
  }
  // Residual sums and the LayerNorm that follows are one fused pass in CPU inference; in training
  // each dropout and its sum are one (add_layer_norm.h).
  torch::Tensor h, cross_in;
  if (pre) {
    cross_in = add_layer_norm(layer.norm2, x, self_out, layer.dropout, &h);
  } else {
    h = cross_in = add_layer_norm(layer.norm1, x, self_out, layer.dropout);
  }
  torch::Tensor cross;
  if (cache) {
    auto cq = cross_attn->split_heads(cross_attn->W_q, cross_in);  // [B, H, 1, d_k]
    // start_cache sanitised the source mask once for all steps.
    cross = cross_attn->attend(cq, cache->cross_k, cache->cross_v, src_mask, /*mask_sanitized=*/true);
  } else if (cross_weights) {
    std::tie(cross, *cross_weights) = cross_attn->forward_with_weights(cross_in, memory, memory, src_mask);
  } else {
    cross = cross_attn(cross_in, memory, memory, src_mask);
  }
  if (pre) {
    const auto ffn_in = add_layer_norm(layer.norm3, h, cross, layer.dropout, &h);
    return layer.dropout->residual(h, layer.ffn(ffn_in));
  }
  h = add_layer_norm(layer.norm2, h, cross, layer.dropout);
  return add_layer_norm(layer.norm3, h, layer.ffn(h), layer.dropout);
}

}  // namespace

torch::Tensor TransformerDecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                                   const torch::Tensor& src_mask, const torch::Tensor& tgt_mask,
                                                   torch::Tensor* cross_weights, const RotaryTables& rotary) {
  return run_layer(*this, x, memory, src_mask, tgt_mask, nullptr, cross_weights, rotary, torch::Tensor());
}

void TransformerDecoderLayerImpl::prepare_cache(const torch::Tensor& memory, LayerKVCache& cache) {
  // Not views: the cache then knows when it alone holds them (rows move in place).
  cache.cross_k = unview(cross_attn->split_heads(cross_attn->W_k, memory));  // [B, G, S, d_k]
  cache.cross_v = unview(cross_attn->split_heads(cross_attn->W_v, memory));  // [B, G, S, d_k]
  cache.self_k = torch::Tensor();
  cache.self_v = torch::Tensor();
  cache.self_rows = torch::Tensor();
  cache.self_room = false;
  cache.cross_room = false;
}

torch::Tensor TransformerDecoderLayerImpl::forward_step(const torch::Tensor& x, LayerKVCache& cache,
                                                        const torch::Tensor& src_mask, const RotaryTables& rotary,
                                                        const torch::Tensor& self_mask) {
  return run_layer(*this, x, torch::Tensor(), src_mask, torch::Tensor(), &cache, nullptr, rotary, self_mask);
}

}  // namespace torchmt
