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
// of 4, outputs to a multiple of 16 (with zeros). Without VNNI, AVX2 computes the same integer
// sums from the same packing (signed inputs, vpmaddubsw), and elsewhere portable C++ does. Rows are independent: any batch composition gives
// the same output for a row.
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
};

// The one per-row quantization of a weight [out, in] (any float dtype), as CTranslate2's
// "int8": inverse_scale = 127 / max|w[n, :]| (127 for an all-zero row), q = rint(w *
// inverse_scale) as int8 (round half to even), in float32; w ~ q / inverse_scale.
// Returns {q [out, in] int8, inverse_scale [out] float}.
std::pair<at::Tensor, at::Tensor> quantize_rows_int8(const at::Tensor& weight);

// The layer for the kernel: weight [out, in] float (any float dtype), bias [out] or undefined.
std::shared_ptr<const Int8LinearWeights> quantize_linear_int8(const at::Tensor& weight, const at::Tensor& bias);

// x [..., in] (float; other float types are converted) -> [..., out] float32, on the CPU,
// parallel over output blocks with the calling thread's intra-op threads.
at::Tensor int8_linear(const at::Tensor& x, const Int8LinearWeights& w);

// The kernels, each computing the same integer sums (so the same outputs): AVX-512 VNNI,
// AVX2 (vpmaddubsw with the input's sign moved onto the weight), and portable C++.
enum class Int8Kernel { portable = 0, avx2 = 1, vnni = 2 };
Int8Kernel int8_cpu_kernel();  // the fastest this CPU runs
const char* int8_kernel_name(Int8Kernel kernel);
// int8_linear uses the fastest kernel at most `limit` (tests compare the kernels); the limit
// starts from TORCHMT_INT8_KERNEL=portable|avx2|avx512-vnni when set (A/B measurements).
void set_int8_kernel_limit(Int8Kernel limit);
Int8Kernel int8_active_kernel();  // the kernel int8_linear runs now

}  // namespace torchmt
