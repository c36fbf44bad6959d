#pragma once
// Decoding state for incremental decoding, owned by the caller (never hidden in modules).
// Per decoder layer: self-attention K/V that grow by one position per step, and the
// cross-attention K/V computed once from the encoder output. All [B, G, T, d_k], G = the
// model's kv_heads (grouped-query attention caches G heads, not H).
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

struct LayerKVCache {
  at::Tensor self_k, self_v;    // [B', G, t, d_k], t = positions decoded so far
  at::Tensor cross_k, cross_v;  // [B, G, S, d_k]
  // A reorder of the self-attention rows not copied yet: row b's keys and values are row
  // self_rows[b] of self_k / self_v ([B] int64; undefined: row b is row b). The next step's
  // append_positions gathers and appends in one copy; beam search reorders at every step and
  // the gather followed by a concatenation copied the whole self-attention cache twice.
  at::Tensor self_rows;
  // self_k / self_v are buffers append_positions made with room after their last position
  // (set by it; whatever else assigns them clears it): the next position may go in place.
  bool self_room = false;
  // The same for cross_k / cross_v, made by DecoderCache::append with room for rows joining.
  bool cross_room = false;
  // self_k / self_v with the pending reorder applied (a copy only if one is pending).
  at::Tensor keys() const;
  at::Tensor values() const;
};

// [rows of past, G, t + 1, d]: past's rows `rows` (all in order when undefined) with `step`
// [n, G, 1, d] appended along dim 2; past undefined: step. One copy on the CPU, into a buffer
// with room for later positions when no reorder came. `room` (optional), in: past is such a
// buffer, so with no reorder and nothing else holding it the position is written in place;
// out: whether the result is such a buffer.
at::Tensor append_positions(const at::Tensor& past, const at::Tensor& rows, const at::Tensor& step,
                            bool* room = nullptr);

// t's elements as a tensor that is not a view (t itself when it needs autograd). A view keeps
// its base alive, so a cache holding views could never tell that it alone holds their memory
// and may move rows or write positions in place.
at::Tensor unview(const at::Tensor& t);

struct DecoderCache {
  std::vector<LayerKVCache> layers;
  at::Tensor src_mask;  // [B / beam, 1, 1, S]
  // Rows per source sentence after expand(): rows s * beam ... s * beam + beam - 1 are the
  // beams of sentence s and share one row of cross_k / cross_v / src_mask (the attention reads
  // row b / beam), instead of beam copies that every finished sentence's select() copied again.
  int64_t beam = 1;
  int64_t length = 0;   // target positions already in the cache (columns of self_k / self_v)
  // Rows at different target positions, once rows have joined a running batch (append):
  // the self-attention K/V are right-aligned, row b's keys are columns [start[b], length)
  // and the columns before them are zeros it never attends to; its next position is
  // length - start[b]. Undefined while every row starts at column 0 (a batch that nothing
  // joined, and what trim() returns to), so that case runs exactly as before.
  at::Tensor start;  // [B] int64 on the cache's device
  // Host copies of the starts and of each row's source extent (non-padding keys), kept
  // from the first append on, so trimming needs no read-back from the device.
  std::vector<int64_t> start_host, source_length_host;

  int64_t batch_size() const { return src_mask.defined() ? src_mask.size(0) * beam : 0; }
  bool ragged() const { return start.defined(); }
  // Keep / reorder / duplicate rows: beam reordering and dropping finished sentences. Once
  // rows have joined, also trims the columns no remaining row uses (trim()). On the CPU, an
  // index in which every new row i is old row index[i] >= i (rows leaving; GreedyStream fills
  // a leaving row's place with a later row) moves rows within tensors held by this cache
  // alone. With beam > 1, an index that keeps every group of beam rows within one sentence
  // selects the shared source rows; any other index first gives every row its own copy.
  void select(const at::Tensor& batch_index);
  // Every row becomes k consecutive rows of one sentence (beam *= k), the source side
  // shared on the CPU; rows that joined a running batch, or a cache on another device, are
  // copied instead (select).
  void expand(int64_t k);
  // Back to one source row per row (beam = 1), copying the shared ones.
  void unshare_source();
  // Adds the rows of `rows` (a fresh cache from start_cache, nothing decoded yet) after the
  // current ones; each starts at its first target position at the next step. Source sides
  // of different lengths are padded to the longer one (masked keys). On the CPU, into room
  // the buffers have (LayerKVCache::cross_room / self_room), else into new ones with room.
  void append(DecoderCache rows);
  // Drops self-attention columns before every row's start and source columns past every
  // row's extent (views: the next step's concatenation copies them anyway).
  void trim();
  // The same for a reorder in which every new row i takes an old row of the same source
  // sentence as old row i (beams reordered, no sentence left): the source side (cross K/V,
  // mask) is identical across those rows, so only the self-attention K/V are reordered.
  void select_target_side(const at::Tensor& batch_index);
  // Applies every layer's pending self-attention reorder (LayerKVCache::self_rows).
  void gather_pending();

 private:
  // The host starts and extents of rows idx[0..n) after a select, then trim().
  void keep_host_rows(const int64_t* idx, int64_t n);
};

}  // namespace torchmt
