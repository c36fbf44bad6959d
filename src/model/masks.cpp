#include "model/masks.h"

#include <torch/torch.h>

namespace torchmt {

at::Tensor make_padding_mask(const at::Tensor& tokens, int64_t pad_id) {
  return tokens.ne(pad_id).unsqueeze(1).unsqueeze(2);  // [B, 1, 1, S]
}

at::Tensor make_causal_mask(int64_t length, const at::Device& device) {
  auto ones = torch::ones({length, length}, torch::TensorOptions().dtype(torch::kBool).device(device));
  return torch::tril(ones).view({1, 1, length, length});  // [1, 1, T, T]
}

at::Tensor make_target_mask(const at::Tensor& tgt, int64_t pad_id) {
  auto keys = make_padding_mask(tgt, pad_id);  // [B, 1, 1, T]
  if (keys.size(-1) > 0) keys.select(-1, 0).fill_(true);  // the start token, which may be pad_id (Marian)
  return keys & make_causal_mask(tgt.size(1), tgt.device());  // [B, 1, T, T]
}

at::Tensor without_empty_rows(const at::Tensor& mask) {
  return mask.logical_or(mask.logical_not().all(-1, /*keepdim=*/true));
}

}  // namespace torchmt
