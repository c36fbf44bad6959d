#pragma once
// The safetensors format (Hugging Face's weights files): an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets}}, then the raw little-endian tensor data.
// Read and written here without Python, for the Marian import and export.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

// Every tensor of `path`, as fp32 (F32, F16 and BF16 files; other dtypes are refused), on the
// CPU. Throws std::runtime_error naming the file on anything malformed: a header longer than
// the file or than 100 MB, offsets outside the data or overlapping, a size that does not match
// its shape, an unknown dtype.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);

// Writes the tensors (fp32, contiguous copies) atomically, in the order given.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace torchmt
