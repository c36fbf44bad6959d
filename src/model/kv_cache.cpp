#include "torchmt/model/kv_cache.h"

#include <torch/torch.h>

namespace torchmt {

void DecoderCache::select(const at::Tensor& batch_index) {
  auto pick = [&](at::Tensor& t) {
    if (t.defined()) t = t.index_select(0, batch_index);
  };
  for (auto& layer : layers) {
    pick(layer.self_k);
    pick(layer.self_v);
    pick(layer.cross_k);
    pick(layer.cross_v);
  }
  pick(src_mask);
}

void DecoderCache::select_target_side(const at::Tensor& batch_index) {
  for (auto& layer : layers) {
    if (layer.self_k.defined()) layer.self_k = layer.self_k.index_select(0, batch_index);
    if (layer.self_v.defined()) layer.self_v = layer.self_v.index_select(0, batch_index);
  }
}

}  // namespace torchmt
