#pragma once
// The CPU kernel layer's one front (private to the library): every hand-written CPU kernel, each
// with a portable copy and copies for the instruction sets of cpu_isa.h, chosen per call by
// cpu_isa(). The `try_` functions return an undefined tensor (or false, or an empty vector)
// where they do not apply: gradients on, autocast, another device or dtype, shapes they do not
// handle; the caller then runs the ATen composite, which is also what training differentiates.
//
// Why hand-written kernels at all: a decoding step of one sentence multiplies 1-5 rows by every
// decoder weight (weight reading, where MKL's and oneDNN's GEMMs pay a fixed setup cost and read
// far below memory bandwidth) and is otherwise dispatch-bound: each ATen op costs microseconds
// of dispatch and allocation whatever its size (tools/bench/DECISIONS.md has the figures).
#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "cpu_isa.h"

namespace torchmt::kernels {

// ---- Linear layers: few rows, fp32 / bf16 ------------------------------------------------------

// The most rows (product of all but the last dimension of x) the few-row kernel takes; above
// it the packed GEMMs are faster.
constexpr int64_t kSmallBatchLinearMaxRows = 8;

// x W^T + b in inference (grad mode off) on the CPU with at most kSmallBatchLinearMaxRows rows,
// fp32 or bf16 (including CPU bf16 autocast, honoured as at::linear does: bf16 inputs through
// autocast's weight cache, bf16 output). Each weight row is streamed once through fp32 FMAs
// against all rows; bf16 uses AVX512-BF16 dot products at cpu_isa() avx512-bf16.
at::Tensor try_small_batch_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// One fp32 output of that kernel: x . w_row (+ *bias when bias is not null) for one row x of K
// values: the same products, summed in the same order as try_small_batch_linear_cpu sums that
// output at the same cpu_isa(). Equal bit for bit on the AVX2 and portable copies; GCC's
// AVX-512 copy rounds the last bit differently between tile shapes (measured on a Xeon), so
// callers rely only on the difference being within the rounding of a K-term fp32 sum.
float small_batch_dot_fp32(const float* x, const float* w_row, const float* bias, int64_t K);

// ---- Linear layers: int8 -----------------------------------------------------------------------
// Dynamic int8 quantization for CPU inference (the reference documents' quantize_dynamic;
// CTranslate2's "int8"): the weight is int8 with one scale per output row, each input row is
// quantized at run time with its own scale (the rule: int8_rule.h), products are summed exactly in
// int32:
//
//   y[m, n] = sx[m] * sw[n] * sum_k qx[m, k] * qw[n, k] + b[n]
//
// The same integers and the same float steps on every instruction set: AVX-512 VNNI (vpdpbusd),
// AVX2 (vpmaddubsw) and portable C++, the zero point's share (zero * sum_k qw[n, k]) subtracted
// once per output.
struct Int8LinearWeights {
  int64_t in = 0, out = 0;        // the float layer's shape: weight [out, in]
  int64_t in_padded = 0, out_padded = 0;
  std::vector<int8_t> packed;     // [out_padded / 16][in_padded / 4][16][4]
  std::vector<float> scale;       // [out_padded]: w ~ qw * scale (0 in the padding)
  std::vector<int32_t> row_sum;   // [out_padded]: sum_k qw[n, k], for the zero point's share
  std::vector<float> bias;        // [out_padded] (zeros when the layer has none)
  // AVX2's order of each block's input groups: first `pair_count[block]` pairs whose vpmaddubsw
  // sums it adds in int16 (one vpmaddwd for two groups; exact: every int16 lane's four |weights|
  // sum to at most 258, and 127 * 258 fits), then the rest one by one.
  std::vector<int16_t> group_order;  // [out_padded / 16][in_padded / 4]
  std::vector<int32_t> pair_count;   // [out_padded / 16]
  // Static int8 (export --calibrate): every input row is quantized over this calibrated range
  // (max|x| seen, with 63 steps a side if a negative input was seen, else 127 from zero), values
  // beyond it clamped, instead of over its own range. 0: dynamic, each row its own.
  float input_amax = 0.f;
  bool input_signed = true;
};

// The one per-row quantization of a weight [out, in] (any float dtype), as CTranslate2's
// "int8": inverse_scale = 127 / max|w[n, :]| (127 for an all-zero row), q = rint(w *
// inverse_scale) as int8 (round half to even), in float32. Returns {q [out, in] int8,
// inverse_scale [out] float}.
std::pair<at::Tensor, at::Tensor> quantize_rows_int8(const at::Tensor& weight);

// The layer for the int8 kernel: weight [out, in] float (any float dtype), bias [out] or undefined;
// input_amax > 0: static input quantization over that range (Int8LinearWeights::input_amax).
std::shared_ptr<const Int8LinearWeights> quantize_linear_int8(const at::Tensor& weight, const at::Tensor& bias,
                                                              float input_amax = 0.f, bool input_signed = true);

// The layer restricted to its outputs `rows` (in that order), taken from its packed integers:
// the same as quantize_linear_int8 of those rows of the float weight and bias, without them.
std::shared_ptr<const Int8LinearWeights> select_int8_rows(const Int8LinearWeights& w, const std::vector<int64_t>& rows);

// x [..., in] (float; other float types are converted) -> [..., out] float32, on the CPU,
// parallel over output blocks with the calling thread's intra-op threads. Rows are independent:
// any batch composition gives the same output for a row.
at::Tensor int8_linear(const at::Tensor& x, const Int8LinearWeights& w);

// ---- Linear layers: many rows, fp32, weights packed once ---------------------------------------
// at::linear calls MKL's sgemm, which re-packs the whole weight into its blocked layout on every
// call; with the few dozen rows of a decoding step that copy is most of the call. Two packed
// GEMMs can serve: MKL's packed API (looked up in the LibTorch that is loaded) and oneDNN's
// (LibTorch's mkldnn::_reorder_linear_weight / _linear_pointwise). Which one packs a weight is
// decided by a rule table (packed_linear.cpp: measured, per instruction set), never timed at
// run time, so a machine's outputs do not depend on a timing race.
enum class PackedGemm { kAten, kMkl, kOnednn };  // kAten: at::linear, nothing packed
const char* packed_gemm_name(PackedGemm gemm);
// The packed GEMMs this process's LibTorch has (MKL's, oneDNN's), in that order.
std::vector<PackedGemm> available_packed_gemms();
// The rule table's choice for a weight [out, in] at the active cpu_isa(), or TORCHMT_PACKED_GEMM;
// kAten when the chosen library is not available.
PackedGemm packed_gemm_for(int64_t out, int64_t in);

struct PackedWeights {
  PackedGemm gemm = PackedGemm::kAten;
  int64_t out = 0, in = 0;
  at::Tensor buffer;  // MKL's packed layout (bytes) or oneDNN's blocked weight
};
// Packs an fp32 weight [out, in] for `gemm` (kAten: nothing).
PackedWeights pack_weight(const at::Tensor& weight, PackedGemm gemm);
// Whether a weight packed for `gemm` serves x (the conditions not about the weight): a packed
// GEMM, x [..., in] fp32 on the CPU with more than kSmallBatchLinearMaxRows rows, in inference
// without autocast. A layer that packs at its first such call (model/linear.cpp) asks this first.
bool packed_gemm_serves(PackedGemm gemm, const at::Tensor& x);
// x W^T + b through the packed weight where packed_gemm_serves(packed.gemm, x) and x's width is
// the weight's; undefined otherwise.
at::Tensor try_packed_linear(const PackedWeights& packed, const at::Tensor& x, const at::Tensor& bias);

// ---- Linear layers: inputs that are mostly zeros, fp32 ------------------------------------------
// A ReLU's output, the input of a feed-forward layer's second Linear, is mostly zeros in a trained
// model (74% in modern-base's layers, 79% in modern-small's, beam 5 on test_2016). A decoding step
// of a few rows streams every weight from memory; a product of zero adds nothing, so each output
// here is the bias plus the products of the row's nonzero inputs alone, summed in ascending input
// order (a multiply-add each), reading only those inputs' rows of W^T (packed once, [in, out]). Rows
// are independent. Sums differ from a dense product's only in their order (the last bits); a
// non-finite weight meeting a zero input gives 0, where a dense product gives NaN.
struct SparseInputWeights {
  int64_t in = 0, out = 0;         // the layer's weight is [out, in]
  at::Tensor transposed;           // W^T [in, out], contiguous fp32: a translator's layer keeps only this
  const float* wt = nullptr;       // transposed's data
  std::vector<float> bias;         // [out], zeros without one
};
std::shared_ptr<const SparseInputWeights> pack_sparse_input_weight(const at::Tensor& weight, const at::Tensor& bias);
// x W^T + b for x [..., in] fp32 on the CPU in inference (no autocast): at most
// kSmallBatchLinearMaxRows rows, or more from AVX2 up where the outputs are a multiple of 64 (W^T
// then stays in cache from row to row; each row's outputs accumulate in registers); undefined
// otherwise. A row's outputs are the same bits in a call of any number of rows.
at::Tensor try_sparse_input_linear(const SparseInputWeights& w, const at::Tensor& x);

// ---- Greedy decoding's next token: the screened output projection ------------------------------
// The next token of greedy search without scores is the argmax of the logits: the projection is
// screened with an int8 copy of its weight (a quarter of the bytes); each approximate logit comes
// with a bound on its distance from the fp32 logit, every row the bound cannot rule out is
// computed in fp32 by small_batch_dot_fp32, and the largest of those is the token. Where another
// candidate comes within a near-tie margin of the best (widened by twice a bound on any fp32
// summation order's rounding, so the full projection's tile cannot reorder them), or the screen
// leaves too many candidates, the row is left to the caller's full projection.
// TORCHMT_SCREENED_ARGMAX=0 turns it off.
struct ScreenedProjection;
// The screen of an fp32 projection weight [V, K] (bias: [V] or undefined).
std::shared_ptr<const ScreenedProjection> build_screen(const at::Tensor& weight, const at::Tensor& bias);
// The screen of the rows `rows` of the weight it was built from (weight, bias: those rows), as
// build_screen of them makes it, from its int8 copy and bounds.
std::shared_ptr<const ScreenedProjection> select_screen_rows(const ScreenedProjection& screen,
                                                             const std::vector<int64_t>& rows, const at::Tensor& weight,
                                                             const at::Tensor& bias);
// For each row of x [N, K] (fp32, inference): the index of its largest x W^T + b as any fp32
// projection of the row computes them, or -1 where the full projection must decide; empty where
// the screen does not apply (nothing computed). weight/bias: those the screen was built from.
// blocked (optional) [N, V] bool: outputs a row may not produce (a shortlist's), never its token.
std::vector<int64_t> try_screened_argmax(const ScreenedProjection& screen, const at::Tensor& x,
                                         const at::Tensor& weight, const at::Tensor& bias,
                                         const at::Tensor& blocked = at::Tensor());
// Beam search's step through the same screen: for each row of x [N, K], the `width` largest
// entries of log_softmax(x W^T + b) (values [N, width], best first, equal ones in index order;
// indices [N, width] int64) and the entries of the `extra` columns (extra_values [N, E]). The best
// `width` are proven as the greedy screen proves its token (their logits in fp32, every other
// output's bound below the width-th by the near-tie margin); the normaliser takes the fp32 logits
// of every output within e^-6 of the best and the int8 ones of the rest (with a correction for the
// input's quantization), so the log-probabilities are ~2e-4 from the full projection's (mean,
// Multi30k models; at most ~2e-3). Rows listed in `open` are left unset for the caller's
// full projection (a non-finite value, too many candidates). False where the screen does not apply
// (nothing computed). TORCHMT_SCREENED_BEAM=0 turns it off.
bool try_screened_log_softmax_top_k(const ScreenedProjection& screen, const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, int64_t width, const std::vector<int64_t>& extra,
                                    at::Tensor* values, at::Tensor* indices, at::Tensor* extra_values,
                                    std::vector<int64_t>* open);
// What the screens of this process did (every thread): rows screened, rows left to the full
// projection, logits computed in fp32.
struct ScreenStats {
  int64_t rows = 0, open_rows = 0, fp32_logits = 0;
};
ScreenStats screen_stats();

// ---- Attention, normalisation, rotary positions ------------------------------------------------

// softmax(q k^T / sqrt(d_k) + mask) v for q [B, H, Tq, d_k] and k, v [B / r, G, Tk, d_k] (G divides
// H; query head h reads K/V head h / (H / G): grouped-query attention; query row b reads K/V row
// b / r: the r beams of a sentence share its cross-attention K/V), fp32 or bf16, outside autograd;
// returns the heads merged, [B, Tq, H * d_k], in q's dtype. `mask` (bool, true = may attend)
// broadcasts to [B / r, H, Tq, Tk]; a query whose keys are all masked attends to all of them.
// Each query row is computed alone, in 8-lane vectors on every level from avx2 up: the same bits
// for a row in a decoding step, a forced decoding and the encoder, on every CPU (the GEMM
// libraries' attention does not: MKL's AVX-512 copies round otherwise, and int8 quantizes it).
at::Tensor try_attention_rows_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask);

// x cos + rotate_half(x) sin (apply_rotary_pos_emb for one tensor) for x [B, H, T, d_k] with a
// contiguous last dimension; cos and sin broadcast to x. Agrees with the composite to rounding.
at::Tensor try_rotary_cpu(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos);
// The same rotation in or out of autograd and autocast, for the model's own autograd function:
// transposed = false is try_rotary_cpu's result, true its transpose (the backward: x cos +
// rotate_half^T(x sin), with rotate_half^T([y1, y2]) = [y2, -y1]). rotary_cpu_applies says which
// tensors it takes (CPU, fp32 or bf16, tables in x's dtype broadcasting to it).
bool rotary_cpu_applies(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos);
at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos, bool transposed);

// {x + y, layer_norm(x + y)} over the last dimension (weight and bias of that size, x's dtype),
// normalised in fp32 (as ATen's does for bf16 input); ~1e-7 relative from the composite in fp32.
std::pair<at::Tensor, at::Tensor> try_add_layer_norm_cpu(const at::Tensor& x, const at::Tensor& y,
                                                         const at::Tensor& weight, const at::Tensor& bias, double eps);

// x = log_softmax(x, -1) in place for an fp32 CPU tensor [rows, n], contiguous, outside autograd;
// false, leaving x alone, where it does not apply. ~1e-6 absolute from ATen's.
bool try_log_softmax_in_place_cpu(at::Tensor& x);

// ---- Selection -----------------------------------------------------------------------------------

// The k best entries of each row of x [rows, n]: best first; equal values in index order; NaN
// counts as -inf, and so does an entry `blocked` [rows, n] marks (null: none; a shortlist's
// columns, without writing -inf into x first). values/indices: [rows, k], k <= n. One pass per
// row that looks at an entry only when it beats the k-th best.
void row_top_k(const float* x, int64_t rows, int64_t n, int64_t k, float* values, int64_t* indices,
               const bool* blocked = nullptr);
// The same for a 2-D tensor (blocked: undefined or bool of x's shape): float32 on the CPU through
// the kernel, anything else through torch::topk. Returns {values [rows, k], indices [rows, k]
// int64} on x's device.
std::pair<at::Tensor, at::Tensor> row_top_k(const at::Tensor& x, int64_t k, const at::Tensor& blocked = at::Tensor());

// ---- Training -------------------------------------------------------------------------------------

// Label-smoothed cross-entropy over logits [rows, vocab] (fp32, or bf16 as uint16_t bits), one
// pass per row: per-row loss and nll (0 for rows whose target is pad_id), and when grad is not
// null, d loss / d logits = softmax - eps / V - (1 - eps) [j == gold] in the logits' dtype.
// Targets must be in [0, vocab).
void label_smoothed_cross_entropy_rows(const float* logits, const int64_t* target, int64_t rows, int64_t vocab,
                                       double smoothing, int64_t pad_id, double* loss, double* nll, float* grad);
void label_smoothed_cross_entropy_rows(const uint16_t* logits, const int64_t* target, int64_t rows, int64_t vocab,
                                       double smoothing, int64_t pad_id, double* loss, double* nll, uint16_t* grad);

// x with dropout's mask applied (CPU, any float dtype): each element kept and scaled by
// 1 / (1 - p), or zeroed, by a hash of (seed, its index) against p * 2^32, in fp32 arithmetic. It
// depends only on (seed, index): forward and backward agree, and any split over threads gives the
// same mask.
at::Tensor hashed_dropout_mask(const at::Tensor& x, double p, uint64_t seed);

// A feed-forward layer's hidden activation in training, one pass each way instead of the bias's
// copy, ReLU and dropout (three passes forward, three back): y = relu(h + bias) with
// hashed_dropout_mask's mask for (seed, index in y) applied. h: the first Linear's output without
// its bias ([..., F], fp32 or bf16, CPU), bias [F] fp32; y in h's dtype. Applies to those inputs
// and p in [0, 1).
bool fused_bias_relu_dropout_applies(const at::Tensor& h, const at::Tensor& bias, double p);
at::Tensor bias_relu_dropout_forward(const at::Tensor& h, const at::Tensor& bias, double p, uint64_t seed);
// Its gradients from y alone (no mask to recompute, nothing saved beyond y, which the second
// Linear keeps anyway): y > 0 where the element was kept and h + bias > 0 (but for a positive
// value under y's dtype's smallest, whose gradient is then dropped), so
// grad_h = y > 0 ? grad_y / (1 - p) : 0 (y's dtype) and grad_bias its sum over the rows (fp32,
// summed in a fixed order of row blocks whatever the thread count).
std::pair<at::Tensor, at::Tensor> bias_relu_dropout_backward(const at::Tensor& grad_y, const at::Tensor& y, double p);

// A residual connection in training, x + dropout(y), one pass instead of the mask's and the sum's
// (and back, one instead of the mask's and, where y's dtype is not the sum's, a cast): x and y of
// one shape on the CPU, fp32 + fp32, fp32 + bf16 or bf16 + bf16, p in [0, 1); the sum in fp32
// arithmetic rounded once to x's dtype, y's element i kept by hashed_dropout_mask's rule for
// (seed, i).
bool fused_residual_dropout_applies(const at::Tensor& x, const at::Tensor& y, double p);
at::Tensor residual_dropout_forward(const at::Tensor& x, const at::Tensor& y, double p, uint64_t seed);
// hashed_dropout_mask of `grad` written in `dtype` (y's gradient from the sum's).
at::Tensor hashed_dropout_mask_into(const at::Tensor& grad, double p, uint64_t seed, at::ScalarType dtype);

// Attention's weights in training, one pass each way where ATen took four (the scale, the mask's
// fill, softmax, dropout) and four back: scores [B, H, Tq, Tk] (contiguous fp32 or bf16, CPU),
// mask undefined or bool broadcast to them (true = may attend; a row with no key allowed takes
// every key, as without_empty_rows does), p in [0, 1). Forward: y = softmax(scores * scale) over
// the allowed keys and the weights, y with hashed_dropout_mask's mask for (seed, index) applied
// (y itself when p = 0), in fp32 arithmetic rounded once to the scores' dtype. Backward: the
// scores' gradient from the weights' and y.
bool attention_softmax_dropout_applies(const at::Tensor& scores, const at::Tensor& mask, double p);
std::pair<at::Tensor, at::Tensor> attention_softmax_dropout_forward(const at::Tensor& scores, const at::Tensor& mask,
                                                                    double scale, double p, uint64_t seed);
at::Tensor attention_softmax_dropout_backward(const at::Tensor& grad, const at::Tensor& y, double scale, double p,
                                              uint64_t seed);

// The sum of the squares of every element of `tensors` (contiguous fp32 CPU tensors: the
// gradients whose norm training clips), as an fp32 scalar: one pass over all of them where a norm
// per tensor was a call each; summed in double over fixed chunks, the same on any thread count.
bool sum_of_squares_applies(const std::vector<at::Tensor>& tensors);
at::Tensor sum_of_squares(const std::vector<at::Tensor>& tensors);

// LayerNorm over the last dimension in training, one pass each way where ATen's mixed-dtype CPU
// kernels (bf16 input, fp32 weight) took several: x fp32 or bf16, weight and bias fp32 [dim].
// Forward: y in x's dtype (fp32 arithmetic, rounded once), each row's mean and 1 / std (fp32
// [rows]) for the backward. Backward: x's gradient in x's dtype; the weight's and bias's (fp32)
// summed over fixed blocks of rows, the same on any thread count.
bool layer_norm_training_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_training_forward(const at::Tensor& x,
                                                                           const at::Tensor& weight,
                                                                           const at::Tensor& bias, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_training_backward(const at::Tensor& grad_y,
                                                                            const at::Tensor& x,
                                                                            const at::Tensor& mean,
                                                                            const at::Tensor& rstd,
                                                                            const at::Tensor& weight);

}  // namespace torchmt::kernels
