#pragma once
// Decoding state for incremental decoding, owned by the caller (never hidden in modules).
// Per decoder layer: self-attention K/V that grow by one position per step, and the
// cross-attention K/V computed once from the encoder output. All [B, G, T, d_k], G = the
// model's kv_heads (grouped-query attention caches G heads, not H).
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

struct LayerKVCache {
  at::Tensor self_k, self_v;    // [B, G, t, d_k], t = positions decoded so far
  at::Tensor cross_k, cross_v;  // [B, G, S, d_k]
};

struct DecoderCache {
  std::vector<LayerKVCache> layers;
  at::Tensor src_mask;  // [B, 1, 1, S]
  int64_t length = 0;   // target positions already in the cache

  int64_t batch_size() const { return src_mask.defined() ? src_mask.size(0) : 0; }
  // Keep / reorder / duplicate rows: beam reordering and dropping finished sentences.
  void select(const at::Tensor& batch_index);
  // The same for a reorder in which every new row i takes an old row of the same source
  // sentence as old row i (beams reordered, no sentence left): the source side (cross K/V,
  // mask) is identical across those rows, so only the self-attention K/V are gathered.
  void select_target_side(const at::Tensor& batch_index);
};

}  // namespace torchmt
