#include "torchmt/io/model_file.h"

#include "bounded_reader.h"

#include <filesystem>
#include <stdexcept>

#include <caffe2/serialize/inline_container.h>

#include "torchmt/util/atomic_file.h"
#include "torchmt/util/integrity.h"
#include "torchmt/util/strings.h"

namespace torchmt {

namespace {

// Keeps the bytes alive for as long as LibTorch holds the reader.
class OwningBoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit OwningBoundedReader(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)), reader_(*bytes_) {}
  size_t size() const override { return reader_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what = "") const override {
    return reader_.read(pos, buf, n, what);
  }

 private:
  std::shared_ptr<const std::string> bytes_;
  BoundedReader reader_;
};

}  // namespace

const char* model_format_name(ModelFormat format) {
  return format == ModelFormat::kTorchScriptExport ? "TorchScript export" : "checkpoint";
}

ModelFile ModelFile::read(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw std::runtime_error(what + " not found: " + path);
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error(what + " " + path + " is a directory");
  auto bytes = std::make_shared<const std::string>(read_file(path));
  check_zip_seal(*bytes, what, path);  // before LibTorch's zip reader sees a byte
  // The exporter writes its marker as an extra file; a checkpoint has none (and says what it is
  // in its own pickled dictionary, which io/checkpoint.cpp checks).
  ModelFormat format = ModelFormat::kCheckpoint;
  try {
    caffe2::serialize::PyTorchStreamReader zip(std::make_shared<BoundedReader>(*bytes));
    if (zip.hasRecord("extra/torchmt.json")) format = ModelFormat::kTorchScriptExport;
  } catch (const c10::Error& e) {
    throw DamagedFileError(what + " " + path + " is corrupt (" + first_line(e.what_without_backtrace()) + ")");
  }
  return ModelFile(path, std::move(bytes), format);
}

std::shared_ptr<caffe2::serialize::ReadAdapterInterface> ModelFile::reader() const {
  return std::make_shared<OwningBoundedReader>(bytes_);
}

}  // namespace torchmt
