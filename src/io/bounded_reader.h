#pragma once
// A PyTorch zip archive read from bytes in memory (checkpoints, pickled state dicts).
#include <algorithm>
#include <cstring>
#include <string>

#include <caffe2/serialize/inline_container.h>

namespace torchmt {

// The archive in memory as LibTorch's zip reader reads it, with reads clamped to its size.
// torch::pickle_load's own in-memory reader copies whatever range the zip directory names: the
// checkpoint fuzzer (tests/fuzz/checkpoint.cpp) found an unsealed archive whose directory sends
// it past the end of the buffer (a heap overflow inside LibTorch). A short read is an error
// the reader reports instead.
class BoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what = "") const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

}  // namespace torchmt
