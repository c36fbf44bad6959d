#pragma once
// A state dict written by Python's torch.save (the zip format of PyTorch >= 1.6), e.g. a Hugging
// Face pytorch_model.bin. LibTorch's own unpickler turns the OrderedDict that torch.save writes
// for a state dict into None, so this is a small pickle reader of its own: dictionaries, tuples,
// lists, numbers, strings and tensors (torch._utils._rebuild_tensor_v2 over storages), nothing
// else (any other global is refused, so no code named by the file ever runs).
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace torchmt {

// name -> tensor (floating tensors as fp32, contiguous). Throws std::runtime_error naming the
// file for the legacy (non-zip) format, a malformed or truncated pickle, a global it does not
// know, a storage whose size does not match, or a top-level object that is not a dictionary.
std::map<std::string, at::Tensor> read_pickled_state_dict(const std::string& path);

}  // namespace torchmt
