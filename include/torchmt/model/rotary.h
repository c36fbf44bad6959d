#pragma once
// Rotary position embedding (RoFormer; reference 000 section 4.4 and 002's
// apply_rotary_pos_emb / rotate_half): each head's query and key are rotated by angles
// proportional to their position, so q.k depends on the positions only through their
// difference. The tables come from PositionalEncoding (positions: rope).
#include <utility>

#include <ATen/core/Tensor.h>

namespace torchmt {

// cos and sin [T, d_k] of the T positions a call covers, or [B, 1, 1, d_k] for one query per
// row at per-row positions (a ragged decoding batch); undefined = no rotation.
struct RotaryTables {
  at::Tensor cos, sin;
  bool defined() const { return cos.defined(); }
};

// x [..., d] -> [-x2, x1], x1 and x2 the halves of the last dimension.
at::Tensor rotate_half(const at::Tensor& x);
// q [B, H, T, d_k], k [B, G, T, d_k] -> (q cos + rotate_half(q) sin, k cos + rotate_half(k) sin),
// argument order as the reference's.
std::pair<at::Tensor, at::Tensor> apply_rotary_pos_emb(const at::Tensor& q, const at::Tensor& k, const at::Tensor& sin,
                                                       const at::Tensor& cos);

}  // namespace torchmt
