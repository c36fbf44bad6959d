#include "torchmt/model/positional_encoding.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "../kernels/primitives.h"
#include "torchmt/model/rotary.h"

namespace torchmt {

PositionalEncodingImpl::PositionalEncodingImpl(const PositionalEncodingOptions& options_) : options(options_) {
  reset();
}

namespace {

void check_length(int64_t offset, int64_t length, int64_t max_positions) {
  if (offset + length > max_positions) {
    throw std::out_of_range("sequence of " + std::to_string(offset + length) +
                            " positions exceeds the model's max_positions " + std::to_string(max_positions));
  }
}

}  // namespace

void PositionalEncodingImpl::reset() {
  const int64_t d = options.embed_dim();
  dropout = register_module("dropout", Dropout(options.dropout()));
  if (options.kind() == Positions::kRope) {
    // theta_i = 10000^(-2i/d_k) for i < d_k/2, each frequency used for both halves
    // (rotate_half pairs dimension j with j + d_k/2).
    const int64_t hd = options.head_dim();
    if (hd <= 0 || hd % 2 != 0) throw std::invalid_argument("rotary positions need an even head width");
    auto inv_freq = torch::exp(torch::arange(0, hd, 2).to(torch::kDouble) * (-std::log(10000.0) / hd));  // [d_k/2]
    auto position = torch::arange(0, options.max_positions(), torch::kDouble).unsqueeze(1);           // [L, 1]
    auto angles = torch::cat({position * inv_freq, position * inv_freq}, 1);                          // [L, d_k]
    cos = register_buffer("cos", torch::cos(angles).to(torch::kFloat));
    sin = register_buffer("sin", torch::sin(angles).to(torch::kFloat));
    return;
  }
  if (options.kind() == Positions::kLearned) {
    pe = register_parameter("pe", torch::empty({1, options.max_positions(), d}));
    reset_parameters();
    return;
  }
  auto table = torch::zeros({options.max_positions(), d});
  auto position = torch::arange(0, options.max_positions(), torch::kFloat).unsqueeze(1);  // [L, 1]
  auto div_term = torch::exp(torch::arange(0, d, 2).to(torch::kFloat) * (-std::log(10000.0) / d));
  table.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, torch::indexing::None, 2)},
                   torch::sin(position * div_term));
  table.index_put_({torch::indexing::Slice(), torch::indexing::Slice(1, torch::indexing::None, 2)},
                   torch::cos(position * div_term).narrow(1, 0, d / 2));
  pe = register_buffer("pe", table.unsqueeze(0));  // [1, L, D]
}

void PositionalEncodingImpl::reset_parameters() {
  if (options.kind() != Positions::kLearned) return;
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(pe, 0.0, 1.0 / std::sqrt(static_cast<double>(options.embed_dim())));
}

torch::Tensor PositionalEncodingImpl::forward(const torch::Tensor& x, int64_t offset) {
  const int64_t length = x.size(1);
  check_length(offset, length, options.max_positions());
  if (options.kind() == Positions::kRope) return dropout(x);
  return dropout(x + pe.narrow(1, offset, length).to(x.dtype()));
}

torch::Tensor PositionalEncodingImpl::forward_at(const torch::Tensor& x, const torch::Tensor& positions) {
  if (options.kind() == Positions::kRope) return dropout(x);
  return dropout(x + pe.select(0, 0).index_select(0, positions).unsqueeze(1).to(x.dtype()));  // [B, 1, D]
}

void PositionalEncodingImpl::check_positions(int64_t end) const { check_length(0, end, options.max_positions()); }

std::pair<torch::Tensor, torch::Tensor> PositionalEncodingImpl::rotary(const torch::Tensor& positions,
                                                                      c10::ScalarType dtype) const {
  if (options.kind() != Positions::kRope) return {};
  auto rows = [&](const torch::Tensor& table) {
    return table.index_select(0, positions).to(dtype).view({positions.size(0), 1, 1, table.size(1)});  // [B, 1, 1, d_k]
  };
  return {rows(cos), rows(sin)};
}

std::pair<torch::Tensor, torch::Tensor> PositionalEncodingImpl::rotary(int64_t offset, int64_t length,
                                                                      c10::ScalarType dtype) const {
  if (options.kind() != Positions::kRope) return {};
  check_length(offset, length, options.max_positions());
  return {cos.narrow(0, offset, length).to(dtype), sin.narrow(0, offset, length).to(dtype)};  // [T, d_k]
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

namespace {

// The rotation with the kernel's transpose as its backward: on the CPU, training's eight ops per
// tensor (and the slices' zero-filled gradients) become one pass each way.
class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& sin,
                            const at::Tensor& cos) {
    ctx->save_for_backward({sin, cos});
    return kernels::rotary_cpu(x, sin, cos, /*transposed=*/false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto tables = ctx->get_saved_variables();
    auto grad = grads[0];
    if (!kernels::rotary_cpu_applies(grad, tables[0], tables[1])) grad = grad.contiguous();
    return {kernels::rotary_cpu(grad, tables[0], tables[1], /*transposed=*/true), at::Tensor(), at::Tensor()};
  }
};

at::Tensor rotate(const at::Tensor& x, const at::Tensor& sin, const at::Tensor& cos) {
  // CPU inference: one fused pass instead of eight ops (kernels/primitives.h).
  if (auto out = kernels::try_rotary_cpu(x, sin, cos); out.defined()) return out;
  if (at::GradMode::is_enabled() && x.requires_grad() && !sin.requires_grad() && !cos.requires_grad()) {
    // Under bf16 autocast the projections are bf16 and the tables fp32: the composite promotes
    // to fp32, which the next matmul casts back; the rotation stays in bf16 instead.
    const bool to_bf16 = x.scalar_type() == at::kBFloat16 && sin.scalar_type() == at::kFloat;
    const auto s = to_bf16 ? sin.to(at::kBFloat16) : sin, c = to_bf16 ? cos.to(at::kBFloat16) : cos;
    if (kernels::rotary_cpu_applies(x, s, c)) return RotaryFunction::apply(x, s, c);
  }
  return x * cos + rotate_half(x) * sin;  // cos/sin [T, d_k] or [B, 1, 1, d_k] broadcast
}

}  // namespace

std::pair<at::Tensor, at::Tensor> apply_rotary_pos_emb(const at::Tensor& q, const at::Tensor& k, const at::Tensor& sin,
                                                       const at::Tensor& cos) {
  return {rotate(q, sin, cos), rotate(k, sin, cos)};
}

}  // namespace torchmt
