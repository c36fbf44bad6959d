#pragma once
// Attention masks. ONE convention across torchmt: a bool tensor where `true` means
// "this query may attend to this key", broadcastable to [B, H, T_q, T_k]. Every mask is
// built on the device of the tensor it is derived from.
#include <ATen/core/Tensor.h>

namespace torchmt {

// tokens [B, S] -> [B, 1, 1, S]: true where the key is not padding.
at::Tensor make_padding_mask(const at::Tensor& tokens, int64_t pad_id);

// [1, 1, T, T]: true on and below the diagonal (position t sees keys <= t).
at::Tensor make_causal_mask(int64_t length, const at::Device& device);

// tgt [B, T] -> [B, 1, T, T]: causal AND target key not padding. Position 0 holds the decoder's
// start token and is never padding, even where the start token is pad_id (Marian's models).
at::Tensor make_target_mask(const at::Tensor& tgt, int64_t pad_id);

// A query whose keys are all masked would softmax over nothing (NaN): such rows are opened
// to every key instead. Attention applies this to each mask it is given; a mask that is
// reused at every decoding step is sanitised once (see MultiHeadAttention::attend).
at::Tensor without_empty_rows(const at::Tensor& mask);

}  // namespace torchmt
