#pragma once

#include <cstdint>
#include <string>

// The one int8 rule (CTranslate2's "int8"), written once for the kernels (int8_linear.cpp,
// screened_argmax.cpp) and the exporters (the TorchScript source is generated from it):
//
//   weight: qw = rint(w * kWeightSteps / max|w[n, :]|), one scale per output row;
//   input:  qx = rint(x * steps / max|x[m, :]|), steps = 63 for a row with a negative value
//           (stored as qx + 64) and 127 for one without (a ReLU's output, stored as qx).
//
// Every stored input is then at most 127, so AVX2's vpmaddubsw (u8 x s8 pairs summed in int16 with
// saturation) is exact on full 127-step weights.
namespace torchmt::kernels::int8_rule {

inline constexpr float kWeightSteps = 127.f;
inline constexpr float kSignedInputSteps = 63.f;    // a row with a negative value: qx in [-63, 63]
inline constexpr float kUnsignedInputSteps = 127.f; // a row without: qx in [0, 127]
inline constexpr int32_t kSignedInputZero = 64;     // qx + 64 in [1, 127]
inline constexpr int32_t kMaxStoredInput = 127;     // every stored input byte, either kind of row

constexpr float input_steps(bool has_negative) { return has_negative ? kSignedInputSteps : kUnsignedInputSteps; }
constexpr int32_t input_zero(bool has_negative) { return has_negative ? kSignedInputZero : 0; }

// The input rule as TorchScript over `x` [..., in] (float): defines `xf`, `steps`, `inverse` (maps
// a row onto [-steps, steps]) and `x_scale` (x ~ q * x_scale), indented by four spaces.
inline std::string torchscript_input_rule() {
  auto number = [](float v) { return std::to_string(static_cast<int>(v)) + ".0"; };
  return "    xf = x.float()\n"
         "    amax = xf.abs().amax(-1, True)\n"
         "    nonzero = amax > 0\n"
         "    steps = torch.where(xf.amin(-1, True) < 0, torch.full_like(amax, " + number(kSignedInputSteps) +
         "), torch.full_like(amax, " + number(kUnsignedInputSteps) + "))\n"
         "    inverse = torch.where(nonzero, steps / amax, torch.ones_like(amax))\n"
         "    x_scale = torch.where(nonzero, amax / steps, torch.ones_like(amax))\n";
}

}  // namespace torchmt::kernels::int8_rule
