#pragma once
// Dynamic int8 quantization of a linear layer for CPU inference (the reference documents'
// quantize_dynamic; CTranslate2's "int8"): the weight is stored as int8 with one scale per
// output row, each input row is quantized at run time with its own scale, the products are
// summed in int32 and scaled back to float.
//
//   y[m, n] = sx[m] * sw[n] * sum_k qx[m, k] * qw[n, k] + b[n]
//   qw = rint(w * 127 / max|w[n, :]|),  qx = rint(x * 127 / max|x[m, :]|)
//
// The kernel uses AVX-512 VNNI (vpdpbusd: unsigned x signed bytes, 4 products per int32 lane),
// so inputs are stored as qx + 128 and sum_k qw[n, k] * 128 is subtracted once per output. The
// weight is packed for it: 16 outputs x 4 inputs per 64-byte block, inputs padded to a multiple
// of 4, outputs to a multiple of 16 (with zeros). Elsewhere portable C++ computes the same integer
// sums (the same outputs). Without VNNI, AVX2 uses the same packing with vpmaddubsw, whose int16
// pair sums saturate, so there (and only there) the numbers are kept small enough to be exact:
// weights on 64 steps a side instead of 127 (qw = rint(w * 64 / max|w[n, :]|), which lets two
// groups of inputs add in int16 before they widen: 3 multiply instructions per 64 products
// instead of 4; the multiply ports are the kernel's limit), and input rows with a negative value
// on 63 steps (qx = rint(x * 63 / max|x|), stored as qx + 64); rows without one (a ReLU's output)
// keep 127 (speed-up: tools/bench/DECISIONS.md; BLEU: tools/bench/README.md). Rows are independent:
// any batch composition gives the same output for a row.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

struct Int8LinearWeights {
  int64_t in = 0, out = 0;        // the float layer's shape: weight [out, in]
  int64_t in_padded = 0, out_padded = 0;
  std::vector<int8_t> packed;     // [out_padded / 16][in_padded / 4][16][4]
  std::vector<float> scale;       // [out_padded]: w ~ qw * scale (0 in the padding)
  std::vector<int32_t> row_sum;   // [out_padded]: 128 * sum_k qw[n, k], the u8 offset's share
  std::vector<float> bias;        // [out_padded] (zeros when the layer has none)
  int32_t steps = 127;            // qw in [-steps, steps]
};

// The one per-row quantization of a weight [out, in] (any float dtype), as CTranslate2's
// "int8": inverse_scale = 127 / max|w[n, :]| (127 for an all-zero row), q = rint(w *
// inverse_scale) as int8 (round half to even), in float32; w ~ q / inverse_scale.
// Returns {q [out, in] int8, inverse_scale [out] float}.
// `steps` < 127 puts the values on fewer steps a side (127 / max|w| becomes steps / max|w|).
std::pair<at::Tensor, at::Tensor> quantize_rows_int8(const at::Tensor& weight, int32_t steps = 127);

// The steps a side the weights get for the active kernel: 64 for AVX2 (whose int16 pair sums then
// take two groups of inputs exactly, see int8_linear.cpp), 127 otherwise.
int32_t int8_weight_steps();

// The layer for the kernel: weight [out, in] float (any float dtype), bias [out] or undefined;
// `steps` 0 = int8_weight_steps().
std::shared_ptr<const Int8LinearWeights> quantize_linear_int8(const at::Tensor& weight, const at::Tensor& bias,
                                                              int32_t steps = 0);

// x [..., in] (float; other float types are converted) -> [..., out] float32, on the CPU,
// parallel over output blocks with the calling thread's intra-op threads.
at::Tensor int8_linear(const at::Tensor& x, const Int8LinearWeights& w);

// The kernels: AVX-512 VNNI and portable C++ (the same integer sums, so the same outputs), and
// AVX2 (vpmaddubsw on 7-bit inputs, exact for the numbers it is given: see above).
enum class Int8Kernel { portable = 0, avx2 = 1, vnni = 2 };
Int8Kernel int8_cpu_kernel();  // the fastest this CPU runs
const char* int8_kernel_name(Int8Kernel kernel);
// int8_linear uses the fastest kernel at most `limit` (tests compare the kernels); the limit
// starts from TORCHMT_INT8_KERNEL=portable|avx2|avx512-vnni when set (A/B measurements).
void set_int8_kernel_limit(Int8Kernel limit);
Int8Kernel int8_active_kernel();  // the kernel int8_linear runs now

}  // namespace torchmt
