#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "int8_rule.h"
#include "primitives.h"
#include "parallel.h"

#if TORCHMT_X86
#include <immintrin.h>
#endif

namespace torchmt::kernels {
namespace {

constexpr int64_t kBlockOut = 16;  // outputs per packed block: one 512-bit register of int32
constexpr int64_t kGroupIn = 4;    // inputs per int32 lane (vpdpbusd)

// Quantized input rows (int8_rule.h): u8 = rint(x * steps / amax) + zero, at most 127, so that
// AVX2's vpmaddubsw pair sums are exact; padded with the zero point (they meet zero weights).
struct QuantizedRows {
  std::vector<uint8_t> values;  // [rows][in_padded]
  std::vector<float> scale;     // [rows]: x ~ (u8 - zero) * scale
  std::vector<int32_t> zero;    // [rows]: int8_rule::input_zero of the row
};

// A row's steps a side and zero point (int8_rule.h).
inline void row_steps(bool has_negative, float& steps, int32_t& zero) {
  steps = int8_rule::input_steps(has_negative);
  zero = int8_rule::input_zero(has_negative);
}

// The scale of a row and the factor that maps it onto [-steps, steps].
inline void row_scale(float amax, float steps, float& scale, float& inverse) {
  scale = amax > 0.f ? amax / steps : 1.f;
  inverse = steps / (amax > 0.f ? amax : steps);
}

// A static range (Int8LinearWeights::input_amax > 0) replaces each row's own; values beyond it are
// clamped to it in float, before the conversion to integers (an outlier far past the range would
// overflow int32). A row's own range holds all its values: the clamp changes none.
inline uint8_t quantize_value(float x, float inverse, float steps, int32_t zero) {
  return static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(std::clamp(x * inverse, -steps, steps))) + zero);
}

struct InputRange {
  float amax = 0.f;  // 0: each row's own
  bool has_negative = true;
  bool fixed() const { return amax > 0.f; }
};

constexpr int64_t kPanelBlocks = 4;  // blocks per VNNI register tile (64 outputs)

// The kernel's two steps, each with a variant per level (cpu_isa.h): the input rows quantized,
// then the output blocks [block_begin, block_end) computed from them.
template <CpuIsa ISA>
void quantize_rows_at(const float* x, int64_t rows, int64_t in, int64_t in_padded, QuantizedRows& q,
                      InputRange range);
template <CpuIsa ISA>
void blocks_at(const QuantizedRows& q, int64_t rows, const Int8LinearWeights& w, float* y, int64_t block_begin,
               int64_t block_end);

template <>
void quantize_rows_at<CpuIsa::kPortable>(const float* x, int64_t rows, int64_t in, int64_t in_padded,
                                         QuantizedRows& q, InputRange range) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * in;
    float amax = range.amax, min = range.fixed() && range.has_negative ? -1.f : 0.f;
    if (!range.fixed())
      for (int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(row[k])), min = std::min(min, row[k]);
    float steps, inverse;
    int32_t zero;
    row_steps(min < 0.f, steps, zero);
    row_scale(amax, steps, q.scale[static_cast<size_t>(m)], inverse);
    q.zero[static_cast<size_t>(m)] = zero;
    uint8_t* out = q.values.data() + m * in_padded;
    for (int64_t k = 0; k < in; ++k) out[k] = quantize_value(row[k], inverse, steps, zero);
  }
}

// y[m, n] for the output blocks [block_begin, block_end), portable integer arithmetic.
template <>
void blocks_at<CpuIsa::kPortable>(const QuantizedRows& q, int64_t rows, const Int8LinearWeights& w, float* y,
                                  int64_t block_begin, int64_t block_end) {
  const int64_t groups = w.in_padded / kGroupIn;
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int8_t* block = w.packed.data() + b * groups * kBlockOut * kGroupIn;
    for (int64_t m = 0; m < rows; ++m) {
      const uint8_t* xq = q.values.data() + m * w.in_padded;
      int32_t acc[kBlockOut] = {};
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t j = 0; j < kBlockOut; ++j)
          for (int64_t i = 0; i < kGroupIn; ++i)
            acc[j] += static_cast<int32_t>(xq[g * kGroupIn + i]) * block[(g * kBlockOut + j) * kGroupIn + i];
      for (int64_t j = 0; j < kBlockOut; ++j) {
        const int64_t n = b * kBlockOut + j;
        if (n >= w.out) break;
        // One rounding, as the vector kernels' fmadd: all kernels give the same floats.
        y[m * w.out + n] =
            std::fma(static_cast<float>(acc[j] - q.zero[m] * w.row_sum[n]), w.scale[n] * q.scale[m], w.bias[n]);
      }
    }
  }
}

#if TORCHMT_X86
#define TORCHMT_VNNI_TARGET TORCHMT_TARGET_AVX512_VNNI

// The same rounding as the portable loop: cvtps_epi32 rounds to nearest even (MXCSR's
// default), as nearbyint does. Vectorized because scalar quantization was a large share of
// int8 decoding (tools/bench/DECISIONS.md).
template <>
TORCHMT_VNNI_TARGET void quantize_rows_at<CpuIsa::kAvx512Vnni>(const float* x, int64_t rows, int64_t in,
                                                             int64_t in_padded, QuantizedRows& q, InputRange range) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * in;
    float amax = range.amax, min = range.fixed() && range.has_negative ? -1.f : 0.f;
    if (!range.fixed()) {
      __m512 amax16 = _mm512_setzero_ps(), min16 = _mm512_setzero_ps();
      for (int64_t k = 0; k < in; k += 16) {
        const __mmask16 mask = static_cast<__mmask16>(in - k >= 16 ? 0xffff : (1u << (in - k)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(mask, row + k);  // zeros past the row's end
        amax16 = _mm512_maskz_max_ps(0xffff, amax16, _mm512_abs_ps(v));
        min16 = _mm512_maskz_min_ps(0xffff, min16, v);
      }
      // Reduced through memory: GCC 12 warns about the undefined operands of _mm512_reduce_max_ps.
      float lanes[16], low[16];
      _mm512_storeu_ps(lanes, amax16);
      _mm512_storeu_ps(low, min16);
      amax = *std::max_element(lanes, lanes + 16);
      min = *std::min_element(low, low + 16);
    }
    float steps, inverse;
    int32_t zero;
    row_steps(min < 0.f, steps, zero);
    row_scale(amax, steps, q.scale[static_cast<size_t>(m)], inverse);
    q.zero[static_cast<size_t>(m)] = zero;
    const __m512i offset = _mm512_set1_epi32(zero);
    const __m512 factor = _mm512_set1_ps(inverse), low = _mm512_set1_ps(-steps), high = _mm512_set1_ps(steps);
    uint8_t* out = q.values.data() + m * in_padded;
    for (int64_t k = 0; k < in; k += 16) {
      const __mmask16 mask = static_cast<__mmask16>(in - k >= 16 ? 0xffff : (1u << (in - k)) - 1);
      // The maskz forms: GCC 12 warns about the undefined operand of the plain ones (as above).
      const __m512 scaled = _mm512_maskz_min_ps(
          0xffff, _mm512_maskz_max_ps(0xffff, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, row + k), factor), low), high);
      const __m512i v = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(0xffff, scaled), offset);
      _mm512_mask_cvtepi32_storeu_epi8(out + k, mask, v);
    }
  }
}

// acc += the u8 x s8 dot products of x and w in groups of four, as _mm512_dpbusd_epi32, written
// as an instruction whose accumulator operand is read and written in its register: with the
// intrinsic GCC 12 copied every accumulator to a fresh register around each vpdpbusd (as many
// register moves as dot products in the tile loop) and spilled one to the stack.
TORCHMT_VNNI_TARGET __attribute__((always_inline)) inline void dpbusd_in_place(__m512i& acc, __m512i x, __m512i w) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

// One block's 16 outputs from 16 int32 sums: y = (sum - x_zero * row_sum) * (w_scale * x_scale) +
// bias, outputs at or past `out` left unwritten. Every x86 int8 kernel ends here, so equal sums
// give equal floats on every level.
struct OutputBlock {
  __m512i wsum;
  __m512 wscale, bias;
  __mmask16 mask;
  int64_t n;
};

TORCHMT_VNNI_TARGET __attribute__((always_inline)) inline OutputBlock output_block(const Int8LinearWeights& w,
                                                                                  int64_t n, int64_t out) {
  const int64_t valid = std::min<int64_t>(kBlockOut, out - n);
  return {_mm512_loadu_si512(w.row_sum.data() + n), _mm512_loadu_ps(w.scale.data() + n),
          _mm512_loadu_ps(w.bias.data() + n), static_cast<__mmask16>(valid >= 16 ? 0xffff : (1u << valid) - 1), n};
}

TORCHMT_VNNI_TARGET __attribute__((always_inline)) inline void store_outputs(const OutputBlock& o, __m512i acc,
                                                                            int32_t xzero, float xscale,
                                                                            float* y_row) {
  // maskz with a full mask: the plain conversion passes an undefined operand that GCC 12
  // reports as uninitialised once inlined.
  const __m512i offset = _mm512_mullo_epi32(o.wsum, _mm512_set1_epi32(xzero));
  const __m512 v = _mm512_maskz_cvtepi32_ps(0xffff, _mm512_sub_epi32(acc, offset));
  const __m512 result = _mm512_fmadd_ps(v, _mm512_mul_ps(o.wscale, _mm512_set1_ps(xscale)), o.bias);
  _mm512_mask_storeu_ps(y_row + o.n, o.mask, result);
}

// Rows x Cols accumulators (Cols blocks of 16 outputs): each weight load serves Rows rows and
// each broadcast input serves Cols blocks. The first kernel (8 rows x 1 block) issued a
// broadcast per vpdpbusd and ran far behind fbgemm (tools/bench/DECISIONS.md).
template <int Rows, int Cols>
TORCHMT_VNNI_TARGET void tile_vnni(const uint8_t* xq, int64_t in_padded, const float* xscale, const int32_t* xzero,
                                   const int8_t* panel,
                                   int64_t groups, const Int8LinearWeights& w, int64_t n0, float* y, int64_t out) {
  const int64_t block_bytes = groups * kBlockOut * kGroupIn;
  // Unrolled so that GCC keeps the accumulators in registers (without the pragmas it spilled
  // them to the stack on every step).
  __m512i acc[Rows][Cols];
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < Cols; ++c) acc[r][c] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i wv[Cols];
#pragma GCC unroll 4
    for (int c = 0; c < Cols; ++c) wv[c] = _mm512_loadu_si512(panel + c * block_bytes + g * kBlockOut * kGroupIn);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      int32_t four;
      std::memcpy(&four, xq + r * in_padded + g * kGroupIn, sizeof four);
      const __m512i xv = _mm512_set1_epi32(four);
#pragma GCC unroll 4
      for (int c = 0; c < Cols; ++c) dpbusd_in_place(acc[r][c], xv, wv[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < Cols; ++c) {
    const OutputBlock o = output_block(w, n0 + c * kBlockOut, out);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) store_outputs(o, acc[r][c], xzero[r], xscale[r], y + r * out);
  }
}

// Rows per register tile: 4 x 4 accumulators + 4 weights + 1 input. With 6 rows GCC 12 kept
// the accumulators on the stack (spills every step) and the tile ran much slower.
constexpr int64_t kPanelRows = 4;

template <int Cols>
TORCHMT_VNNI_TARGET void panel_vnni(const QuantizedRows& q, int64_t rows, const Int8LinearWeights& w, float* y,
                                    const int8_t* panel, int64_t groups, int64_t n0) {
  for (int64_t m0 = 0; m0 < rows; m0 += kPanelRows) {
    const uint8_t* xq = q.values.data() + m0 * w.in_padded;
    const float* xs = q.scale.data() + m0;
    const int32_t* xz = q.zero.data() + m0;
    float* ym = y + m0 * w.out;
    switch (std::min<int64_t>(kPanelRows, rows - m0)) {
      case 1: tile_vnni<1, Cols>(xq, w.in_padded, xs, xz, panel, groups, w, n0, ym, w.out); break;
      case 2: tile_vnni<2, Cols>(xq, w.in_padded, xs, xz, panel, groups, w, n0, ym, w.out); break;
      case 3: tile_vnni<3, Cols>(xq, w.in_padded, xs, xz, panel, groups, w, n0, ym, w.out); break;
      default: tile_vnni<4, Cols>(xq, w.in_padded, xs, xz, panel, groups, w, n0, ym, w.out); break;
    }
  }
}

// Output blocks [block_begin, block_end) in panels of kPanelBlocks (the last may be narrower).
template <>
TORCHMT_VNNI_TARGET void blocks_at<CpuIsa::kAvx512Vnni>(const QuantizedRows& q, int64_t rows,
                                                      const Int8LinearWeights& w, float* y, int64_t block_begin,
                                                      int64_t block_end) {
  const int64_t groups = w.in_padded / kGroupIn;
  for (int64_t b = block_begin; b < block_end; b += kPanelBlocks) {
    const int8_t* panel = w.packed.data() + b * groups * kBlockOut * kGroupIn;
    const int64_t n0 = b * kBlockOut;
    switch (std::min<int64_t>(kPanelBlocks, block_end - b)) {
      case 1: panel_vnni<1>(q, rows, w, y, panel, groups, n0); break;
      case 2: panel_vnni<2>(q, rows, w, y, panel, groups, n0); break;
      case 3: panel_vnni<3>(q, rows, w, y, panel, groups, n0); break;
      default: panel_vnni<4>(q, rows, w, y, panel, groups, n0); break;
    }
  }
}

// ---- AMX: int8 tile products ---------------------------------------------------------------------
// A packed block's [groups][16][4] bytes are AMX's weight-tile rows as they are (16 groups: 64
// inputs of 16 outputs a tile) and the quantized rows its input tiles; tdpbusd forms the same
// u8 x s8 int32 sums as vpdpbusd, and the sums end in the same store_outputs. Tiles: 0-3 the
// 2 x 2 accumulators (32 rows x 2 blocks), 4-5 the inputs, 6-7 the weights: all eight.
constexpr int64_t kTileRows = 16;   // rows of an input or accumulator tile
constexpr int64_t kTileInputs = 64; // inputs of a tile row (64 bytes)

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Input and accumulator tiles of the two row tiles: `rows0` and `rows1` rows (0: unused).
TORCHMT_TARGET_AVX512_AMX void configure_tiles(int64_t rows0, int64_t rows1) {
  TileConfig c;
  const auto set = [&](int tile, int64_t rows, int64_t bytes) {
    c.rows[tile] = static_cast<uint8_t>(rows);
    c.bytes_per_row[tile] = static_cast<uint16_t>(rows > 0 ? bytes : 0);
  };
  for (int tile : {0, 1}) set(tile, rows0, kBlockOut * 4);
  for (int tile : {2, 3}) set(tile, rows1, kBlockOut * 4);
  set(4, rows0, kTileInputs);
  set(5, rows1, kTileInputs);
  for (int tile : {6, 7}) set(tile, kTileInputs / kGroupIn, kBlockOut * kGroupIn);
  _tile_loadconfig(&c);
}

template <>
TORCHMT_TARGET_AVX512_AMX void blocks_at<CpuIsa::kAvx512Amx>(const QuantizedRows& q, int64_t rows,
                                                           const Int8LinearWeights& w, float* y,
                                                           int64_t block_begin, int64_t block_end) {
  // Tiles take whole groups of 64 inputs: other widths go through the VNNI tiles, and so does one
  // row, where a tile's set-up and stores cost more than they save (greedy batch 1: 1.02x the time).
  if (w.in_padded % kTileInputs != 0 || rows < 2)
    return blocks_at<CpuIsa::kAvx512Vnni>(q, rows, w, y, block_begin, block_end);
  const int64_t groups = w.in_padded / kGroupIn, block_bytes = groups * kBlockOut * kGroupIn;
  constexpr int64_t kAccBytes = kBlockOut * 4;
  alignas(64) int32_t acc[4][kTileRows][kBlockOut];  // tiles 0-3: [row tile][block] in the order 0 1 2 3
  int64_t configured0 = -1, configured1 = -1;
  for (int64_t m0 = 0; m0 < rows; m0 += 2 * kTileRows) {
    const int64_t rows0 = std::min(kTileRows, rows - m0);
    const int64_t rows1 = std::clamp<int64_t>(rows - m0 - kTileRows, 0, kTileRows);
    if (rows0 != configured0 || rows1 != configured1) configure_tiles(configured0 = rows0, configured1 = rows1);
    const uint8_t* x0 = q.values.data() + m0 * w.in_padded;
    const uint8_t* x1 = x0 + kTileRows * w.in_padded;
    for (int64_t b = block_begin; b < block_end; b += 2) {
      const bool two = b + 1 < block_end;
      const int8_t* w0 = w.packed.data() + b * block_bytes;
      const int8_t* w1 = w0 + block_bytes;
      _tile_zero(0);
      _tile_zero(1);
      if (rows1 > 0) {
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k = 0; k < w.in_padded; k += kTileInputs) {
        const int64_t g = k / kGroupIn;
        _tile_loadd(4, x0 + k, w.in_padded);
        _tile_loadd(6, w0 + g * kBlockOut * kGroupIn, kBlockOut * kGroupIn);
        _tile_dpbusd(0, 4, 6);
        if (two) {
          _tile_loadd(7, w1 + g * kBlockOut * kGroupIn, kBlockOut * kGroupIn);
          _tile_dpbusd(1, 4, 7);
        }
        if (rows1 > 0) {
          _tile_loadd(5, x1 + k, w.in_padded);
          _tile_dpbusd(2, 5, 6);
          if (two) _tile_dpbusd(3, 5, 7);
        }
      }
      _tile_stored(0, acc[0], kAccBytes);
      if (two) _tile_stored(1, acc[1], kAccBytes);
      if (rows1 > 0) {
        _tile_stored(2, acc[2], kAccBytes);
        if (two) _tile_stored(3, acc[3], kAccBytes);
      }
      for (int c = 0; c < (two ? 2 : 1); ++c) {
        const OutputBlock o = output_block(w, (b + c) * kBlockOut, w.out);
        for (int64_t r = 0; r < rows0 + rows1; ++r) {
          const int64_t m = m0 + r;
          const int32_t* sums = acc[(r < kTileRows ? 0 : 2) + c][r % kTileRows];
          store_outputs(o, _mm512_load_si512(sums), q.zero[static_cast<size_t>(m)],
                        q.scale[static_cast<size_t>(m)], y + m * w.out);
        }
      }
    }
  }
  _tile_release();
}

// ---- AVX2 (no VNNI): vpmaddubsw on inputs of at most 127 -----------------------------------------
// vpmaddubsw multiplies unsigned by signed bytes and adds pairs into int16 with saturation; with
// every kernel's inputs at most 127 (int8_rule.h) a pair is at most 127 * 127 * 2 = 32,258:
// exact, the same integers as the other kernels. vpmaddwd with ones adds the pairs into int32
// lanes of 4 products: 2 multiplies per 32 products, the multiply ports being the limit.
// (CTranslate2 gets its AVX2 speed from the same instructions on 8-bit inputs through MKL or
// oneDNN, whose pair sums can saturate: its int8 output depends on the CPU.)
#define TORCHMT_AVX2_TARGET TORCHMT_TARGET_AVX2

template <>
TORCHMT_AVX2_TARGET void quantize_rows_at<CpuIsa::kAvx2>(const float* x, int64_t rows, int64_t in, int64_t in_padded,
                                                       QuantizedRows& q, InputRange range) {
  // Lane order after the two packs: [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] -> a b c d.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256 sign_bit = _mm256_set1_ps(-0.f);
  for (int64_t m = 0; m < rows; ++m) {
    const float* row = x + m * in;
    float amax = range.amax, min = range.fixed() && range.has_negative ? -1.f : 0.f;
    int64_t k = 0;
    if (!range.fixed()) {
      __m256 amax8 = _mm256_setzero_ps(), min8 = _mm256_setzero_ps();
      for (; k + 8 <= in; k += 8) {
        const __m256 v = _mm256_loadu_ps(row + k);
        amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign_bit, v));
        min8 = _mm256_min_ps(min8, v);
      }
      float lanes[8], low[8];
      _mm256_storeu_ps(lanes, amax8);
      _mm256_storeu_ps(low, min8);
      amax = *std::max_element(lanes, lanes + 8);
      min = *std::min_element(low, low + 8);
      for (; k < in; ++k) amax = std::max(amax, std::fabs(row[k])), min = std::min(min, row[k]);
    }
    float steps, inverse;
    int32_t zero;
    row_steps(min < 0.f, steps, zero);
    row_scale(amax, steps, q.scale[static_cast<size_t>(m)], inverse);
    q.zero[static_cast<size_t>(m)] = zero;
    const __m256 factor = _mm256_set1_ps(inverse);
    const __m256i offset = _mm256_set1_epi32(zero);
    const __m256 low = _mm256_set1_ps(-steps), high = _mm256_set1_ps(steps);
    uint8_t* out = q.values.data() + m * in_padded;
    k = 0;
    // cvtps_epi32 rounds to nearest even (MXCSR's default), as nearbyint below. Values are in
    // [0, 127] after the clamp and the offset, so the saturating packs change none.
    for (; k + 32 <= in; k += 32) {
      __m256i v[4];
      for (int i = 0; i < 4; ++i) {
        const __m256 scaled =
            _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(row + k + 8 * i), factor), low), high);
        v[i] = _mm256_add_epi32(_mm256_cvtps_epi32(scaled), offset);
      }
      const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_permutevar8x32_epi32(bytes, order));
    }
    for (; k < in; ++k) out[k] = quantize_value(row[k], inverse, steps, zero);
  }
}

// acc += the products of one group of 4 inputs (x: its 4 u8, broadcast) with 8 outputs' weights
// (w: [8 outputs][4 inputs] s8). As one asm statement with the weights as a memory operand and
// the accumulator read and written in its register: with intrinsics GCC 12 copied each
// accumulator after its add and spilled some of them to the stack.
TORCHMT_AVX2_TARGET __attribute__((always_inline)) inline void add_one_group(__m256i& acc, __m256i x, const int8_t* w,
                                                                            __m256i ones) {
  __m256i t;
  asm("vpmaddubsw %[w], %[x], %[t]\n\t"
      "vpmaddwd %[ones], %[t], %[t]\n\t"
      "vpaddd %[t], %[acc], %[acc]"
      : [acc] "+x"(acc), [t] "=&x"(t)
      : [x] "x"(x), [w] "m"(*reinterpret_cast<const __m256i*>(w)), [ones] "x"(ones));
}

// The tile's steps, one function per row (R from 0 to Rows - 1, recursing at compile time): every
// accumulator is indexed by constants, so GCC keeps them in registers (with loops under
// `#pragma GCC unroll` it kept the array on the stack, unrolling coming after the pass that turns
// arrays into registers). Two accumulators of 8 outputs per row: one 16-output block.
inline int32_t four_inputs(const uint8_t* p) {
  int32_t four;
  std::memcpy(&four, p, sizeof four);
  return four;
}

template <int R, int Rows>
TORCHMT_AVX2_TARGET __attribute__((always_inline)) inline void rows_one_group(__m256i (&acc)[Rows][2],
                                                                             const uint8_t* x, int64_t in_padded,
                                                                             const int8_t* wg, __m256i ones) {
  if constexpr (R < Rows) {
    const __m256i xv = _mm256_set1_epi32(four_inputs(x + R * in_padded));
    add_one_group(acc[R][0], xv, wg, ones);
    add_one_group(acc[R][1], xv, wg + 32, ones);
    rows_one_group<R + 1, Rows>(acc, x, in_padded, wg, ones);
  }
}

// y[R, n .. n + 8) for accumulator column C (outputs n0 + 8 C ..).
template <int R, int Rows, int C>
TORCHMT_AVX2_TARGET __attribute__((always_inline)) inline void rows_store(const __m256i (&acc)[Rows][2],
                                                                         const float* xscale, const int32_t* xzero,
                                                                         __m256i wsum, __m256 wscale, __m256 bias,
                                                                         __m256i mask, bool full, float* y,
                                                                         int64_t out) {
  if constexpr (R < Rows) {
    const __m256i sums = _mm256_sub_epi32(acc[R][C], _mm256_mullo_epi32(wsum, _mm256_set1_epi32(xzero[R])));
    const __m256 result =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(wscale, _mm256_set1_ps(xscale[R])), bias);
    // A masked store only for the last, partial 8: vmaskmovps stores are slow on AMD's cores.
    if (full) _mm256_storeu_ps(y + R * out, result);
    else _mm256_maskstore_ps(y + R * out, mask, result);
    rows_store<R + 1, Rows, C>(acc, xscale, xzero, wsum, wscale, bias, mask, full, y, out);
  }
}

template <int Rows, int C>
TORCHMT_AVX2_TARGET __attribute__((always_inline)) inline void store_column(const __m256i (&acc)[Rows][2],
                                                                           const float* xscale, const int32_t* xzero,
                                                                           const Int8LinearWeights& w, int64_t n,
                                                                           float* y, int64_t out) {
  const int64_t valid = std::min<int64_t>(8, out - n);
  if (valid <= 0) return;
  const __m256 wscale = _mm256_loadu_ps(w.scale.data() + n);
  const __m256 bias = _mm256_loadu_ps(w.bias.data() + n);
  const __m256i wsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.row_sum.data() + n));
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(valid)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  rows_store<0, Rows, C>(acc, xscale, xzero, wsum, wscale, bias, mask, valid == 8, y + n, out);
}

// acc += two groups' products (wa, wb: 8 outputs' 4 weights each), their vpmaddubsw sums added in
// int16 (exact for a pair of Int8LinearWeights::group_order) and widened by one vpmaddwd: 3
// multiplies for 64 products instead of 4. One asm statement for add_one_group's reason.
TORCHMT_AVX2_TARGET __attribute__((always_inline)) inline void add_two_groups(__m256i& acc, __m256i xa, __m256i xb,
                                                                             __m256i wa, __m256i wb, __m256i ones) {
  __m256i t, u;
  asm("vpmaddubsw %[wa], %[xa], %[t]\n\t"
      "vpmaddubsw %[wb], %[xb], %[u]\n\t"
      "vpaddw %[u], %[t], %[t]\n\t"
      "vpmaddwd %[ones], %[t], %[t]\n\t"
      "vpaddd %[t], %[acc], %[acc]"
      : [acc] "+x"(acc), [t] "=&x"(t), [u] "=&x"(u)
      : [xa] "x"(xa), [xb] "x"(xb), [wa] "x"(wa), [wb] "x"(wb), [ones] "x"(ones));
}

// The pair's weights are loaded once for all rows (memory operands, one load per row, were slower).
template <int R, int Rows>
TORCHMT_AVX2_TARGET __attribute__((always_inline)) inline void rows_two_groups(__m256i (&acc)[Rows][2],
                                                                              const uint8_t* xa, const uint8_t* xb,
                                                                              int64_t in_padded, const __m256i (&w)[4],
                                                                              __m256i ones) {
  if constexpr (R < Rows) {
    const __m256i va = _mm256_set1_epi32(four_inputs(xa + R * in_padded));
    const __m256i vb = _mm256_set1_epi32(four_inputs(xb + R * in_padded));
    add_two_groups(acc[R][0], va, vb, w[0], w[2], ones);
    add_two_groups(acc[R][1], va, vb, w[1], w[3], ones);
    rows_two_groups<R + 1, Rows>(acc, xa, xb, in_padded, w, ones);
  }
}

// Rows x 16 outputs (one block), its groups in the block's group_order: pairs, then the rest
// (4 multiplies, vpmaddubsw and vpmaddwd, per 64 products), the multiply ports being the limit.
template <int Rows>
TORCHMT_AVX2_TARGET void tile_avx2(const uint8_t* xq, int64_t in_padded, const float* xscale, const int32_t* xzero,
                                   const int8_t* block, const int16_t* order, int64_t pairs, const int8_t* ahead,
                                   int64_t groups, const Int8LinearWeights& w, int64_t n0, float* y, int64_t out) {
  constexpr int64_t kGroupBytes = kBlockOut * kGroupIn;  // [16 outputs][4 inputs]
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[Rows][2] = {};
  int64_t i = 0;
  for (; i < 2 * pairs; i += 2) {
    const int64_t a = order[i], b = order[i + 1];
    _mm_prefetch(reinterpret_cast<const char*>(ahead + i * kGroupBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(ahead + (i + 1) * kGroupBytes), _MM_HINT_T0);
    const auto* wa = reinterpret_cast<const __m256i*>(block + a * kGroupBytes);
    const auto* wb = reinterpret_cast<const __m256i*>(block + b * kGroupBytes);
    const __m256i w[4] = {_mm256_loadu_si256(wa), _mm256_loadu_si256(wa + 1), _mm256_loadu_si256(wb),
                          _mm256_loadu_si256(wb + 1)};
    rows_two_groups<0, Rows>(acc, xq + a * kGroupIn, xq + b * kGroupIn, in_padded, w, ones);
  }
  for (; i < groups; ++i) {
    const int64_t g = order[i];
    _mm_prefetch(reinterpret_cast<const char*>(ahead + i * kGroupBytes), _MM_HINT_T0);
    rows_one_group<0, Rows>(acc, xq + g * kGroupIn, in_padded, block + g * kGroupBytes, ones);
  }
  store_column<Rows, 0>(acc, xscale, xzero, w, n0, y, out);
  store_column<Rows, 1>(acc, xscale, xzero, w, n0 + 8, y, out);
}

constexpr int64_t kRowTileAvx2 = 4;

// Output blocks [block_begin, block_end): each block's weights (in_padded * 16 bytes: 4 KiB at
// 256 inputs) stay in L1 while every row tile passes over them.
template <>
TORCHMT_AVX2_TARGET void blocks_at<CpuIsa::kAvx2>(const QuantizedRows& q, int64_t rows, const Int8LinearWeights& w,
                                                float* y, int64_t block_begin, int64_t block_end) {
  const int64_t groups = w.in_padded / kGroupIn;
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int8_t* block = w.packed.data() + b * groups * kBlockOut * kGroupIn;
    const int16_t* order = w.group_order.data() + b * groups;
    const int64_t pairs = w.pair_count[static_cast<size_t>(b)];
    const int64_t n0 = b * kBlockOut;
    // The first row tile brings the next block's lines into L1 (one per group): the pairs' order
    // jumps within a block, which the hardware's prefetcher does not follow.
    const int8_t* next_block = b + 1 < block_end ? block + groups * kBlockOut * kGroupIn : block;
    for (int64_t m0 = 0; m0 < rows; m0 += kRowTileAvx2) {
      const uint8_t* xq = q.values.data() + m0 * w.in_padded;
      const float* xs = q.scale.data() + m0;
      const int32_t* xz = q.zero.data() + m0;
      float* ym = y + m0 * w.out;
      const int8_t* ahead = m0 == 0 ? next_block : block;  // later tiles: L1 hits, no branch in the loop
      switch (std::min<int64_t>(kRowTileAvx2, rows - m0)) {
        case 1: tile_avx2<1>(xq, w.in_padded, xs, xz, block, order, pairs, ahead, groups, w, n0, ym, w.out); break;
        case 2: tile_avx2<2>(xq, w.in_padded, xs, xz, block, order, pairs, ahead, groups, w, n0, ym, w.out); break;
        case 3: tile_avx2<3>(xq, w.in_padded, xs, xz, block, order, pairs, ahead, groups, w, n0, ym, w.out); break;
        default: tile_avx2<4>(xq, w.in_padded, xs, xz, block, order, pairs, ahead, groups, w, n0, ym, w.out); break;
      }
    }
  }
}
#endif

void quantize_rows(const float* x, int64_t rows, int64_t in, int64_t in_padded, QuantizedRows& q, CpuIsa isa,
                   InputRange range) {
  q.values.resize(static_cast<size_t>(rows * in_padded));
  q.scale.resize(static_cast<size_t>(rows));
  q.zero.resize(static_cast<size_t>(rows));
  // The padding inputs meet zero weights: any value within the kernels' range.
  if (in_padded != in)
    for (int64_t m = 0; m < rows; ++m) std::fill_n(q.values.data() + m * in_padded + in, in_padded - in, 0);
  isa_dispatch<CpuIsa::kAvx512Vnni, CpuIsa::kAvx2>(
      isa, [&](auto level) { quantize_rows_at<decltype(level)::value>(x, rows, in, in_padded, q, range); });
}

// Int8LinearWeights::group_order: in each block, the group with the largest lane first takes the
// smallest-laned group it fits with (every lane of the two at most kPairLaneLimit), until none is
// left; groups that fit with none go one by one. A lane is one int16 of vpmaddubsw's output: an
// output's two weights of a group's two halves.
constexpr int32_t kPairLaneLimit = 32767 / int8_rule::kMaxStoredInput;

void pair_groups(Int8LinearWeights& q) {
  constexpr int64_t kLanes = kBlockOut * kGroupIn / 2;
  using Lanes = std::array<int16_t, kLanes>;
  const int64_t groups = q.in_padded / kGroupIn, blocks = q.out_padded / kBlockOut;
  q.group_order.resize(static_cast<size_t>(blocks * groups));
  q.pair_count.assign(static_cast<size_t>(blocks), 0);
  std::vector<Lanes> lanes(static_cast<size_t>(groups));
  std::vector<int16_t> widest(static_cast<size_t>(groups)), narrowest(static_cast<size_t>(groups)), pool, singles;
  auto fits = [](const Lanes& a, const Lanes& b) {  // a loop the compiler vectorises
    int16_t worst = 0;
    for (int64_t l = 0; l < kLanes; ++l)
      worst = std::max<int16_t>(worst, static_cast<int16_t>(a[static_cast<size_t>(l)] + b[static_cast<size_t>(l)]));
    return worst <= kPairLaneLimit;
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* block = q.packed.data() + b * groups * kBlockOut * kGroupIn;
    pool.resize(static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g) {
      const int8_t* w = block + g * kBlockOut * kGroupIn;  // [16 outputs][4 inputs]
      auto& lane = lanes[static_cast<size_t>(g)];
      for (int64_t l = 0; l < kLanes; ++l)
        lane[static_cast<size_t>(l)] = static_cast<int16_t>(std::abs(w[2 * l]) + std::abs(w[2 * l + 1]));
      widest[static_cast<size_t>(g)] = *std::max_element(lane.begin(), lane.end());
      narrowest[static_cast<size_t>(g)] = *std::min_element(lane.begin(), lane.end());
      pool[static_cast<size_t>(g)] = static_cast<int16_t>(g);
    }
    // Narrowest first; the widest is taken from the back.
    std::stable_sort(pool.begin(), pool.end(),
                     [&](int16_t a, int16_t c) { return widest[static_cast<size_t>(a)] < widest[static_cast<size_t>(c)]; });
    int16_t* order = q.group_order.data() + b * groups;
    int64_t pairs = 0;
    singles.clear();
    while (!pool.empty()) {
      const int16_t g = pool.back();
      pool.pop_back();
      const auto& lane = lanes[static_cast<size_t>(g)];
      auto partner = std::find_if(pool.begin(), pool.end(), [&](int16_t h) {
        const auto i = static_cast<size_t>(h), j = static_cast<size_t>(g);
        if (widest[j] + widest[i] <= kPairLaneLimit) return true;
        return widest[j] + narrowest[i] <= kPairLaneLimit && fits(lane, lanes[i]);
      });
      if (partner == pool.end()) {
        singles.push_back(g);
        continue;
      }
      order[2 * pairs] = g;
      order[2 * pairs + 1] = *partner;
      ++pairs;
      pool.erase(partner);
    }
    std::copy(singles.begin(), singles.end(), order + 2 * pairs);
    q.pair_count[static_cast<size_t>(b)] = static_cast<int32_t>(pairs);
  }
}

}  // namespace

std::pair<at::Tensor, at::Tensor> quantize_rows_int8(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2, "int8 quantization: expected a 2-D weight");
  constexpr float range = int8_rule::kWeightSteps;
  auto w = weight.detach().to(torch::kCPU, torch::kFloat).contiguous();  // [out, in]
  const int64_t out = w.size(0), in = w.size(1);
  auto q = torch::empty({out, in}, torch::kChar);
  auto inverse = torch::empty({out}, torch::kFloat);
  // Row by row, no whole-weight temporaries: a vocabulary projection's four fp32 copies (33 MB
  // each at 16,000 x 512) stayed in a helper thread's heap arena after the load.
  const float* wd = w.data_ptr<float>();
  int8_t* qd = q.data_ptr<int8_t>();
  float* inv = inverse.data_ptr<float>();
  for (int64_t r = 0; r < out; ++r) {
    const float* row = wd + r * in;
    float amax = 0.f;
    for (int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(row[k]));
    if (amax == 0.f) amax = range;
    amax = std::max(amax, range / FLT_MAX);
    inv[r] = range / amax;
    for (int64_t k = 0; k < in; ++k)
      qd[r * in + k] = static_cast<int8_t>(std::nearbyint(row[k] * inv[r]));  // half to even, as ATen's round
  }
  return {q, inverse};
}

namespace {
// A layer of `out` outputs over `in` inputs with every padded field sized and zero, to be filled.
std::shared_ptr<Int8LinearWeights> zeroed_int8_layer(int64_t in, int64_t out, float input_amax, bool input_signed) {
  auto q = std::make_shared<Int8LinearWeights>();
  q->input_amax = input_amax;
  q->input_signed = input_signed;
  q->in = in;
  q->out = out;
  q->in_padded = (in + kGroupIn - 1) / kGroupIn * kGroupIn;
  q->out_padded = (out + kBlockOut - 1) / kBlockOut * kBlockOut;
  q->packed.assign(static_cast<size_t>(q->out_padded * q->in_padded), 0);
  q->scale.assign(static_cast<size_t>(q->out_padded), 0.f);
  q->row_sum.assign(static_cast<size_t>(q->out_padded), 0);
  q->bias.assign(static_cast<size_t>(q->out_padded), 0.f);
  return q;
}
}  // namespace

std::shared_ptr<const Int8LinearWeights> quantize_linear_int8(const at::Tensor& weight, const at::Tensor& bias,
                                                              float input_amax, bool input_signed) {
  // (quantize_rows_int8 refuses a weight that is not 2-D.)
  TORCH_CHECK(weight.dim() != 2 || weight.size(1) <= 4 * INT16_MAX, "int8 quantization: at most ", 4 * INT16_MAX,
              " inputs per layer (group_order is int16), the layer has ", weight.size(-1));
  auto [qw, inverse] = quantize_rows_int8(weight);
  auto q = zeroed_int8_layer(qw.size(1), qw.size(0), input_amax, input_signed);
  if (bias.defined()) {
    auto b = bias.detach().to(torch::kCPU, torch::kFloat).contiguous();
    std::copy(b.data_ptr<float>(), b.data_ptr<float>() + q->out, q->bias.begin());
  }
  const int8_t* data = qw.data_ptr<int8_t>();
  const float* inverse_data = inverse.data_ptr<float>();
  const int64_t groups = q->in_padded / kGroupIn, in = q->in;
  int8_t* packed = q->packed.data();  // not q->packed[...] in the loop: its data pointer was reloaded every store
  for (int64_t n = 0; n < q->out; ++n) {
    const int8_t* row = data + n * in;
    const int64_t block = n / kBlockOut, lane = n % kBlockOut;
    int8_t* out = packed + (block * groups * kBlockOut + lane) * kGroupIn;  // [groups][16][4] from this lane
    int32_t sum = 0;
    for (int64_t k = 0; k < in; ++k) {
      out[(k / kGroupIn) * kBlockOut * kGroupIn + k % kGroupIn] = row[k];
      sum += row[k];
    }
    q->scale[static_cast<size_t>(n)] = 1.f / inverse_data[n];  // an all-zero row's sums are 0 whatever it is
    q->row_sum[static_cast<size_t>(n)] = sum;
  }
  pair_groups(*q);
  return q;
}

std::shared_ptr<const Int8LinearWeights> select_int8_rows(const Int8LinearWeights& w, const std::vector<int64_t>& rows) {
  auto q = zeroed_int8_layer(w.in, static_cast<int64_t>(rows.size()), w.input_amax, w.input_signed);
  const int64_t groups = q->in_padded / kGroupIn;
  const int8_t* from = w.packed.data();
  int8_t* to = q->packed.data();
  for (int64_t n = 0; n < q->out; ++n) {
    const int64_t source = rows[static_cast<size_t>(n)];
    TORCH_CHECK(source >= 0 && source < w.out, "select_int8_rows: row ", source, " outside the layer's ", w.out);
    // A lane's 4 bytes of each group, [groups][16][4] from the lane, moved from its block to the new one.
    const int8_t* in_lane = from + ((source / kBlockOut) * groups * kBlockOut + source % kBlockOut) * kGroupIn;
    int8_t* out_lane = to + ((n / kBlockOut) * groups * kBlockOut + n % kBlockOut) * kGroupIn;
    for (int64_t g = 0; g < groups; ++g)
      std::memcpy(out_lane + g * kBlockOut * kGroupIn, in_lane + g * kBlockOut * kGroupIn, kGroupIn);
    q->scale[static_cast<size_t>(n)] = w.scale[static_cast<size_t>(source)];
    q->row_sum[static_cast<size_t>(n)] = w.row_sum[static_cast<size_t>(source)];
    q->bias[static_cast<size_t>(n)] = w.bias[static_cast<size_t>(source)];
  }
  pair_groups(*q);  // a block's pairs depend on the rows it now holds
  return q;
}

at::Tensor int8_linear(const at::Tensor& x, const Int8LinearWeights& w) {
  TORCH_CHECK(x.device().is_cpu(), "int8 linear layers run on the CPU");
  TORCH_CHECK(x.size(-1) == w.in, "int8 linear: input has ", x.size(-1), " features, the layer ", w.in);
  auto input = x.to(torch::kFloat).contiguous();
  const int64_t rows = input.numel() / w.in;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.out;
  auto y = torch::empty(shape, input.options());  // [..., out]
  if (rows == 0) return y;
  const CpuIsa isa = cpu_isa();
  // This thread's buffer, reused (a decoding step calls this ~20 times). The lambdas below run
  // on other threads, so they get it through a reference, not by naming the thread_local.
  thread_local QuantizedRows buffer;
  QuantizedRows& q = buffer;
  quantize_rows(input.data_ptr<float>(), rows, w.in, w.in_padded, q, isa, InputRange{w.input_amax, w.input_signed});
  float* out = y.data_ptr<float>();
  const int64_t blocks = w.out_padded / kBlockOut;
  isa_dispatch<CpuIsa::kAvx512Amx, CpuIsa::kAvx512Vnni, CpuIsa::kAvx2>(isa, [&](auto level) {
    constexpr CpuIsa kLevel = decltype(level)::value;
    // Threads take whole panels (VNNI, AMX) or blocks; grain: enough work per thread that a fork is worth it.
    const int64_t unit = kLevel >= CpuIsa::kAvx512Vnni ? kPanelBlocks : 1;
    const int64_t grain = std::max<int64_t>(1, (kLevel >= CpuIsa::kAvx512Vnni ? 16 : 64) / std::max<int64_t>(1, rows));
    parallel_for(0, (blocks + unit - 1) / unit, grain, [&](int64_t begin, int64_t end) {
      blocks_at<kLevel>(q, rows, w, out, begin * unit, std::min(blocks, end * unit));
    });
  });
  return y;
}

}  // namespace torchmt::kernels
