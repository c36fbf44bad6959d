#include "torchmt/model/kv_cache.h"

#include <algorithm>
#include <stdexcept>

#include <torch/torch.h>

namespace torchmt {

namespace {

// t padded with zeros (false for a mask) along `dim` to `size`.
at::Tensor pad_to(const at::Tensor& t, int64_t dim, int64_t size) {
  if (t.size(dim) >= size) return t;
  auto shape = t.sizes().vec();
  shape[dim] = size - t.size(dim);
  return torch::cat({t, torch::zeros(shape, t.options())}, dim);
}

// src_mask [B, 1, 1, S] -> per row, one past its last key that may be attended to.
std::vector<int64_t> source_extents(const at::Tensor& src_mask) {
  const int64_t s = src_mask.size(-1);
  auto columns = torch::arange(1, s + 1, src_mask.options().dtype(torch::kLong));       // [S]
  auto extent = (src_mask.reshape({-1, s}).to(torch::kLong) * columns).amax(1).to(torch::kCPU);  // [B]
  return {extent.data_ptr<int64_t>(), extent.data_ptr<int64_t>() + extent.numel()};
}

}  // namespace

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
  if (source_length_host.empty()) return;  // nothing ever joined: nothing to trim
  auto index = batch_index.to(torch::kCPU).contiguous();
  const auto* idx = index.data_ptr<int64_t>();
  std::vector<int64_t> starts, extents;
  for (int64_t i = 0; i < index.numel(); ++i) {
    starts.push_back(start_host.at(static_cast<size_t>(idx[i])));
    extents.push_back(source_length_host.at(static_cast<size_t>(idx[i])));
  }
  start_host = std::move(starts);
  source_length_host = std::move(extents);
  trim();
}

void DecoderCache::append(DecoderCache rows) {
  if (rows.length != 0 || rows.ragged()) throw std::invalid_argument("only rows with nothing decoded can join a batch");
  if (batch_size() == 0) {
    *this = std::move(rows);
    return;
  }
  if (rows.layers.size() != layers.size()) throw std::invalid_argument("joining rows come from another model");
  if (source_length_host.empty()) {
    source_length_host = source_extents(src_mask);
    start_host.assign(static_cast<size_t>(batch_size()), 0);
  }
  for (int64_t e : source_extents(rows.src_mask)) {
    source_length_host.push_back(e);
    start_host.push_back(length);
  }
  const int64_t source = std::max(src_mask.size(-1), rows.src_mask.size(-1));
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& mine = layers[i];
    auto& theirs = rows.layers[i];
    mine.cross_k = torch::cat({pad_to(mine.cross_k, 2, source), pad_to(theirs.cross_k, 2, source)}, 0);  // [B', G, S', d_k]
    mine.cross_v = torch::cat({pad_to(mine.cross_v, 2, source), pad_to(theirs.cross_v, 2, source)}, 0);  // [B', G, S', d_k]
    if (mine.self_k.defined()) {  // the new rows' columns so far: zeros they never attend to
      auto shape = mine.self_k.sizes().vec();
      shape[0] = rows.batch_size();
      auto zeros = torch::zeros(shape, mine.self_k.options());                 // [n, G, T, d_k]
      mine.self_k = torch::cat({mine.self_k, zeros}, 0);                       // [B', G, T, d_k]
      mine.self_v = torch::cat({mine.self_v, zeros}, 0);                       // [B', G, T, d_k]
    }
  }
  src_mask = torch::cat({pad_to(src_mask, 3, source), pad_to(rows.src_mask, 3, source)}, 0);  // [B', 1, 1, S']
  trim();
}

void DecoderCache::trim() {
  if (source_length_host.empty()) return;
  if (batch_size() == 0) {
    start = at::Tensor();
    return;
  }
  const int64_t first = *std::min_element(start_host.begin(), start_host.end());
  if (first > 0) {
    for (auto& layer : layers) {
      layer.self_k = layer.self_k.narrow(2, first, length - first);  // [B, G, T', d_k]
      layer.self_v = layer.self_v.narrow(2, first, length - first);  // [B, G, T', d_k]
    }
    length -= first;
    for (auto& s : start_host) s -= first;
  }
  const int64_t source = *std::max_element(source_length_host.begin(), source_length_host.end());
  if (source > 0 && source < src_mask.size(-1)) {
    for (auto& layer : layers) {
      layer.cross_k = layer.cross_k.narrow(2, 0, source);  // [B, G, S', d_k]
      layer.cross_v = layer.cross_v.narrow(2, 0, source);  // [B, G, S', d_k]
    }
    src_mask = src_mask.narrow(3, 0, source);  // [B, 1, 1, S']
  }
  const bool uniform = std::all_of(start_host.begin(), start_host.end(), [](int64_t s) { return s == 0; });
  start = uniform ? at::Tensor() : torch::tensor(start_host, torch::kLong).to(src_mask.device());
}

void DecoderCache::select_target_side(const at::Tensor& batch_index) {
  for (auto& layer : layers) {
    if (layer.self_k.defined()) layer.self_k = layer.self_k.index_select(0, batch_index);
    if (layer.self_v.defined()) layer.self_v = layer.self_v.index_select(0, batch_index);
  }
}

}  // namespace torchmt
