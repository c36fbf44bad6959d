#include "torchmt/model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include "../kernels/parallel.h"

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

// Row i of the result is row rows[index[i]] (index alone when rows is undefined).
at::Tensor compose(const at::Tensor& rows, const at::Tensor& index) {
  return rows.defined() ? rows.index_select(0, index) : index;
}

// A tensor over t's memory with these sizes, strides and offset that is not a view: made
// directly, not through as_strided/narrow + set_, whose dispatched operations and autograd
// view at every append cost more than the in-place cache saves (tools/bench/DECISIONS.md).
at::Tensor alias(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides, int64_t offset) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(t.storage()), t.key_set(), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return out;
}

// Whether t is a CPU tensor whose memory no other tensor, view or copy of the handle (a
// copied cache) can see: then rows may be moved, and positions past its extent written, in
// place.
bool sole_owner(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.use_count() == 1 && t.has_storage() &&
         t.storage().use_count() == 1;
}

// Elements one row (dim 0) of t spans, or -1 when rows may overlap (then no in-place moves).
int64_t row_span(const at::Tensor& t) {
  int64_t span = 1;
  for (int64_t d = 1; d < t.dim(); ++d) {
    if (t.size(d) == 0) return 0;
    if (t.stride(d) < 0) return -1;
    span += (t.size(d) - 1) * t.stride(d);
  }
  return t.dim() > 0 && span <= t.stride(0) ? span : -1;
}

// The first n rows of t after row i took row idx[i], in place. Every idx[i] >= i: ascending
// copies never read a row already overwritten. Only for a sole owner with disjoint rows.
at::Tensor compact_rows(const at::Tensor& t, const int64_t* idx, int64_t n) {
  const int64_t span = row_span(t);
  const size_t elem = t.element_size();
  auto* base = static_cast<char*>(t.data_ptr());
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] != i && span > 0)
      std::memmove(base + static_cast<size_t>(i * t.stride(0)) * elem,
                   base + static_cast<size_t>(idx[i] * t.stride(0)) * elem, static_cast<size_t>(span) * elem);
  auto sizes = t.sizes().vec();
  sizes[0] = n;
  return alias(t, sizes, t.strides(), t.storage_offset());
}

bool compactable(const at::Tensor& t) { return sole_owner(t) && row_span(t) >= 0; }

// The room of t when it is (a view of the first rows and some columns of) a buffer made here
// or by append_positions, [R, G, cap, d], that nothing else holds: the columns from t's first
// one to the end of its slot, and the rows the buffer has. {-1, -1} otherwise.
struct Room {
  int64_t columns = -1, rows = -1;
};
Room room_of(const at::Tensor& t) {
  if (t.dim() != 4 || !sole_owner(t)) return {};
  const int64_t groups = t.size(1), d = t.size(3), slot = t.stride(1);
  if (groups <= 0 || d <= 0 || t.stride(3) != 1 || t.stride(2) != d || slot % d != 0 || t.stride(0) != groups * slot)
    return {};
  const int64_t offset = t.storage_offset(), row0 = offset - offset % t.stride(0);
  return {slot / d - (offset % slot) / d,
          (static_cast<int64_t>(t.storage().nbytes() / t.element_size()) - row0) / t.stride(0)};
}

// Positions a self-attention buffer holds for t positions: room to append in place.
int64_t capacity_for(int64_t t) { return std::max<int64_t>(2 * t, 8); }

// t [B, G, C, d] with n more rows and `columns` >= C columns: the new rows and the old rows'
// new columns zeros (keys no row attends to; zeros keep every attention path finite). In
// place when `room` (t is a buffer made here or by append_positions, [R, G, cap, d] with
// R > B rows and columns after t's), nothing else holds it and it has the rows and columns;
// otherwise a new buffer with room (1.5x the rows, 2x the columns). Sets room: the result is
// such a buffer. Concatenating copied every row's cross- and self-attention K/V at each join
// of serve's in-flight batching, which cost throughput (tools/bench/DECISIONS.md).
at::Tensor grow(const at::Tensor& t, int64_t n, int64_t columns, bool& room) {
  const int64_t rows = t.size(0), groups = t.size(1), c = t.size(2), d = t.size(3);
  const Room have = room ? room_of(t) : Room{};
  if (have.columns >= columns && have.rows >= rows + n) {
    auto out = alias(t, {rows + n, groups, columns, d}, t.strides(), t.storage_offset());  // [B + n, G, columns, d]
    if (columns > c) out.narrow(0, 0, rows).narrow(2, c, columns - c).zero_();
    if (n > 0) out.narrow(0, rows, n).zero_();
    return out;
  }
  const int64_t total = rows + n;
  auto buffer = torch::zeros({total + std::max<int64_t>(8, total / 2), groups, capacity_for(columns), d},
                             t.options());                                              // [R, G, cap, d]
  auto out = alias(buffer, {total, groups, columns, d}, buffer.strides(), 0);           // [B + n, G, columns, d]
  buffer = at::Tensor();
  if (rows > 0 && c > 0) out.narrow(0, 0, rows).narrow(2, 0, c).copy_(t);
  room = true;
  return out;
}

}  // namespace

at::Tensor unview(const at::Tensor& t) {
  if (!t.defined() || !t.is_view() || t.requires_grad()) return t;
  return alias(t, t.sizes(), t.strides(), t.storage_offset());
}

at::Tensor LayerKVCache::keys() const {
  return self_rows.defined() && self_k.defined() ? self_k.index_select(0, self_rows) : self_k;
}

at::Tensor LayerKVCache::values() const {
  return self_rows.defined() && self_v.defined() ? self_v.index_select(0, self_rows) : self_v;
}

at::Tensor append_positions(const at::Tensor& past, const at::Tensor& rows, const at::Tensor& step, bool* room) {
  const bool past_room = room && *room;
  if (room) *room = false;
  if (!past.defined()) return step;
  const bool fast = past.device().is_cpu() && step.device().is_cpu() && past.dim() == 4 && step.dim() == 4 &&
                    past.scalar_type() == step.scalar_type() && past.stride(3) == 1 &&
                    (past.stride(2) == past.size(3) || past.size(2) == 1) && step.is_contiguous() && step.size(2) == 1 &&
                    step.size(1) == past.size(1) && step.size(3) == past.size(3) &&
                    (!rows.defined() || (rows.device().is_cpu() && rows.scalar_type() == at::kLong));
  if (!fast) {
    const auto picked = rows.defined() ? past.index_select(0, rows) : past;  // [n, G, t, d]
    return torch::cat({picked, step}, 2);                                    // [n, G, t + 1, d]
  }
  const int64_t n = step.size(0), groups = past.size(1), t = past.size(2), d = past.size(3);
  const auto index = rows.defined() ? rows.contiguous() : at::Tensor();
  if (index.defined() && index.numel() != n) throw std::invalid_argument("append_positions: rows and step differ in rows");
  if (!index.defined() && past.size(0) != n) throw std::invalid_argument("append_positions: past and step differ in rows");
  const int64_t* idx = index.defined() ? index.data_ptr<int64_t>() : nullptr;
  for (int64_t i = 0; i < n; ++i)
    if (idx && (idx[i] < 0 || idx[i] >= past.size(0))) throw std::out_of_range("append_positions: row out of range");
  const size_t elem = past.element_size();
  const auto* add = static_cast<const char*>(step.data_ptr());
  const size_t row = static_cast<size_t>(d) * elem;
  // No reorder, and past is a buffer with room after its last position that nothing else
  // sees: the new position is written in place ([n, G, cap, d] with cap > t), where a copy
  // moved the whole self-attention cache at every step (1.2 MB at 26 rows, 3 layers, 2 K/V
  // heads of 64, 15 positions).
  const Room have = past_room && !idx ? room_of(past) : Room{};
  if (n > 0 && groups > 0 && have.columns > t && have.rows >= n) {
    auto* base = static_cast<char*>(past.data_ptr());
    for (int64_t bg = 0; bg < n * groups; ++bg)
      std::memcpy(base + static_cast<size_t>((bg / groups) * past.stride(0) + (bg % groups) * past.stride(1) + t * d) * elem,
                  add + static_cast<size_t>(bg) * row, row);
    *room = true;
    return alias(past, {n, groups, t + 1, d}, past.strides(), past.storage_offset());  // [n, G, t + 1, d]
  }
  // A copy: with room to grow when no reorder came (the next steps append in place); a beam
  // reorders at every step, so its copy is exact.
  const int64_t cap = idx ? t + 1 : capacity_for(t + 1);
  auto out = torch::empty({n, groups, cap, d}, past.options());  // [n, G, cap, d]
  const auto* src = static_cast<const char*>(past.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  const size_t block = static_cast<size_t>(t * d) * elem;
  kernels::parallel_for(0, n * groups, 16, [&](int64_t begin, int64_t end) {
    for (int64_t bg = begin; bg < end; ++bg) {
      const int64_t b = bg / groups, g = bg % groups;
      const int64_t from = idx ? idx[b] : b;
      char* o = dst + static_cast<size_t>(bg * cap * d) * elem;
      std::memcpy(o, src + static_cast<size_t>(from * past.stride(0) + g * past.stride(1)) * elem, block);
      std::memcpy(o + block, add + static_cast<size_t>(bg) * row, row);
    }
  });
  if (room) *room = cap > t + 1;
  return cap == t + 1 ? out : alias(out, {n, groups, t + 1, d}, out.strides(), 0);  // [n, G, t + 1, d]
}

void DecoderCache::gather_pending() {
  for (auto& layer : layers) {
    if (!layer.self_rows.defined()) continue;
    layer.self_k = layer.keys();
    layer.self_v = layer.values();
    layer.self_rows = at::Tensor();
    layer.self_room = false;
  }
}

void DecoderCache::unshare_source() {
  if (beam == 1) return;
  for (auto& layer : layers) {
    if (layer.cross_k.defined()) layer.cross_k = layer.cross_k.repeat_interleave(beam, 0);  // [B, G, S, d_k]
    if (layer.cross_v.defined()) layer.cross_v = layer.cross_v.repeat_interleave(beam, 0);  // [B, G, S, d_k]
    layer.cross_room = false;
  }
  src_mask = src_mask.repeat_interleave(beam, 0);  // [B, 1, 1, S]
  beam = 1;
}

void DecoderCache::expand(int64_t k) {
  if (k < 1) throw std::invalid_argument("expand: k must be at least 1");
  if (k == 1 || batch_size() == 0) return;
  const auto rows = torch::arange(batch_size(), src_mask.options().dtype(torch::kLong)).repeat_interleave(k);
  // Shared only where the decoding attention kernel reads row b / beam (the CPU's): other
  // attention paths would copy the rows at every step instead of at every select.
  if (!source_length_host.empty() || !src_mask.device().is_cpu()) {  // joined rows, or not CPU: copies
    unshare_source();
    select(rows);
    return;
  }
  for (auto& layer : layers)
    if (layer.self_k.defined()) layer.self_rows = compose(layer.self_rows, rows);
  beam *= k;
}

void DecoderCache::select(const at::Tensor& batch_index) {
  auto pick_source = [&](const at::Tensor& index) {
    for (auto& layer : layers) {
      if (layer.cross_k.defined()) layer.cross_k = layer.cross_k.index_select(0, index);  // [B', G, S, d_k]
      if (layer.cross_v.defined()) layer.cross_v = layer.cross_v.index_select(0, index);  // [B', G, S, d_k]
      layer.cross_room = false;
    }
    src_mask = src_mask.index_select(0, index);  // [B', 1, 1, S]
  };
  // Rows leaving a batch on the CPU, the others keeping their order or taking a leaving
  // row's place (every new row i is old row index[i] >= i): rows move within their tensors
  // instead of each tensor being copied (greedy search drops its finished rows at nearly
  // every step). Tensors that another holds are copied as below.
  if (beam == 1 && batch_index.device().is_cpu() && batch_index.scalar_type() == at::kLong &&
      batch_index.dim() == 1 && src_mask.device().is_cpu()) {
    const auto index = batch_index.contiguous();
    const auto* idx = index.data_ptr<int64_t>();
    const int64_t n = index.numel(), old_rows = batch_size();
    bool in_place = n <= old_rows;
    for (int64_t i = 0; in_place && i < n; ++i) in_place = idx[i] >= i && idx[i] < old_rows;
    if (in_place) {
      auto move = [&](at::Tensor& t) {
        if (!t.defined()) return;
        t = compactable(t) ? compact_rows(t, idx, n) : t.index_select(0, index);  // a copy has no room
      };
      for (auto& layer : layers) {
        if (layer.self_k.defined() && layer.self_rows.defined()) {
          layer.self_rows = compose(layer.self_rows, index);  // still pending: gathered at the next append
        } else {
          const bool room = layer.self_room && compactable(layer.self_k) && compactable(layer.self_v);
          move(layer.self_k);  // [B', G, t, d_k]
          move(layer.self_v);
          layer.self_room = room;  // rows moved within the buffers keep their room
        }
        const bool room = layer.cross_room && compactable(layer.cross_k) && compactable(layer.cross_v);
        move(layer.cross_k);  // [B', G, S, d_k]
        move(layer.cross_v);
        layer.cross_room = room;
      }
      src_mask = src_mask.index_select(0, index);  // [B', 1, 1, S]
      keep_host_rows(idx, n);
      return;
    }
  }
  // The self-attention side is reordered when the next step appends to it.
  for (auto& layer : layers)
    if (layer.self_k.defined()) layer.self_rows = compose(layer.self_rows, batch_index);
  if (beam > 1) {
    // Groups of beam rows that each stay within one sentence keep sharing its source row.
    const auto index = batch_index.to(torch::kCPU).contiguous();
    const auto* idx = index.data_ptr<int64_t>();
    const int64_t n = index.numel();
    std::vector<int64_t> sentences;
    bool grouped = n % beam == 0;
    for (int64_t i = 0; grouped && i < n; i += beam) {
      sentences.push_back(idx[i] / beam);
      for (int64_t j = 1; j < beam && grouped; ++j) grouped = idx[i + j] / beam == idx[i] / beam;
    }
    if (grouped) {
      pick_source(torch::tensor(sentences, torch::kLong).to(src_mask.device()));
      return;
    }
    unshare_source();
  }
  pick_source(batch_index);
  if (source_length_host.empty()) return;  // nothing ever joined: nothing to trim
  auto index = batch_index.to(torch::kCPU).contiguous();
  keep_host_rows(index.data_ptr<int64_t>(), index.numel());
}

void DecoderCache::keep_host_rows(const int64_t* idx, int64_t n) {
  if (source_length_host.empty()) return;  // nothing ever joined: nothing to trim
  std::vector<int64_t> starts, extents;
  for (int64_t i = 0; i < n; ++i) {
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
  gather_pending();
  unshare_source();
  rows.unshare_source();
  if (source_length_host.empty()) {
    source_length_host = source_extents(src_mask);
    start_host.assign(static_cast<size_t>(batch_size()), 0);
  }
  for (int64_t e : source_extents(rows.src_mask)) {
    source_length_host.push_back(e);
    start_host.push_back(length);
  }
  const int64_t source = std::max(src_mask.size(-1), rows.src_mask.size(-1));
  const int64_t old_rows = batch_size(), n = rows.batch_size();
  const bool cpu = src_mask.device().is_cpu();
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& mine = layers[i];
    auto& theirs = rows.layers[i];
    if (cpu) {  // into buffers with room for rows and columns, in place when they have it
      bool k_room = mine.cross_room, v_room = mine.cross_room;
      mine.cross_k = grow(mine.cross_k, n, source, k_room);  // [B', G, S', d_k]
      mine.cross_v = grow(mine.cross_v, n, source, v_room);  // [B', G, S', d_k]
      mine.cross_room = k_room && v_room;
      const int64_t theirs_source = theirs.cross_k.size(2);
      mine.cross_k.narrow(0, old_rows, n).narrow(2, 0, theirs_source).copy_(theirs.cross_k);
      mine.cross_v.narrow(0, old_rows, n).narrow(2, 0, theirs_source).copy_(theirs.cross_v);
      if (mine.self_k.defined()) {  // the new rows' columns so far: zeros they never attend to
        bool sk = mine.self_room, sv = mine.self_room;
        mine.self_k = grow(mine.self_k, n, mine.self_k.size(2), sk);  // [B', G, T, d_k]
        mine.self_v = grow(mine.self_v, n, mine.self_v.size(2), sv);  // [B', G, T, d_k]
        mine.self_room = sk && sv;
      }
      continue;
    }
    mine.cross_k = torch::cat({pad_to(mine.cross_k, 2, source), pad_to(theirs.cross_k, 2, source)}, 0);  // [B', G, S', d_k]
    mine.cross_v = torch::cat({pad_to(mine.cross_v, 2, source), pad_to(theirs.cross_v, 2, source)}, 0);  // [B', G, S', d_k]
    if (mine.self_k.defined()) {  // the new rows' columns so far: zeros they never attend to
      auto shape = mine.self_k.sizes().vec();
      shape[0] = n;
      auto zeros = torch::zeros(shape, mine.self_k.options());                 // [n, G, T, d_k]
      mine.self_k = torch::cat({mine.self_k, zeros}, 0);                       // [B', G, T, d_k]
      mine.self_v = torch::cat({mine.self_v, zeros}, 0);                       // [B', G, T, d_k]
      mine.self_room = false;
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
      layer.self_k = unview(layer.self_k.narrow(2, first, length - first));  // [B, G, T', d_k]
      layer.self_v = unview(layer.self_v.narrow(2, first, length - first));  // [B, G, T', d_k]
    }
    length -= first;
    for (auto& s : start_host) s -= first;
  }
  const int64_t source = *std::max_element(source_length_host.begin(), source_length_host.end());
  if (source > 0 && source < src_mask.size(-1)) {
    for (auto& layer : layers) {
      layer.cross_k = unview(layer.cross_k.narrow(2, 0, source));  // [B, G, S', d_k]
      layer.cross_v = unview(layer.cross_v.narrow(2, 0, source));  // [B, G, S', d_k]
    }
    src_mask = src_mask.narrow(3, 0, source);  // [B, 1, 1, S']
  }
  const bool uniform = std::all_of(start_host.begin(), start_host.end(), [](int64_t s) { return s == 0; });
  start = uniform ? at::Tensor() : torch::tensor(start_host, torch::kLong).to(src_mask.device());
}

void DecoderCache::select_target_side(const at::Tensor& batch_index) {
  for (auto& layer : layers)
    if (layer.self_k.defined()) layer.self_rows = compose(layer.self_rows, batch_index);
}

}  // namespace torchmt
