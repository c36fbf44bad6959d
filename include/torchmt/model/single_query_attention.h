#pragma once
// Attention of one new query position per sequence on the CPU (an incremental decoding step).
#include <ATen/core/Tensor.h>

namespace torchmt {

// softmax(q k^T / sqrt(d_k) + mask) v for q [B, H, 1, d_k] and k, v [B / r, G, Tk, d_k] (G divides
// H; query head h reads K/V head h / (H / G): grouped-query attention, G = H for MHA; query
// row b reads K/V row b / r: the r beams of a sentence share its cross-attention K/V) when
// the call is inference (grad mode off) on the CPU in fp32 or bf16; returns the heads
// already merged, [B, 1, H * d_k], in q's dtype, or an undefined tensor when it does not
// apply. `mask` (bool, true = may attend, masks.h) broadcasts to [B / r, H, 1, Tk]; a query
// whose keys are all masked attends to all of them, as MultiHeadAttention does.
//
// Why: a decoding step of one sentence attends with a single query per head over ~15-30
// keys; ATen's dispatch of bmm, scale, mask, softmax and bmm (tens of microseconds per op)
// costs far more than the ~100k multiply-adds (tools/bench/DECISIONS.md). Scores, softmax
// and the weighted sum run in fp32 in one pass per head.
at::Tensor try_single_query_attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& mask);

}  // namespace torchmt
