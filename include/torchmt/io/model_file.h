#pragma once
// A model file opened once: its bytes read once, its seal (checksum) verified before any parser
// sees them, and what it is told from the archive's records, not from its name. Checkpoints
// (io/checkpoint.h) and TorchScript exports (loading/exported_model.h) are read from it; an
// imported model (`torchmt import`) is a checkpoint.
//
//   ModelFile file = ModelFile::read(path);   // throws std::runtime_error naming path:
//                                             // not found, damaged, unsealed, not a zip
//   file.format()    kCheckpoint | kTorchScriptExport
//   file.reader()    LibTorch's zip reader interface over the bytes (reads clamped to them)
#include <memory>
#include <string>

namespace caffe2::serialize {
class ReadAdapterInterface;
}

namespace torchmt {

enum class ModelFormat { kCheckpoint, kTorchScriptExport };
const char* model_format_name(ModelFormat format);  // "checkpoint" | "TorchScript export"

class ModelFile {
 public:
  // `what` names the file in errors ("checkpoint", "export"; "model" where either will do).
  static ModelFile read(const std::string& path, const std::string& what = "model");

  const std::string& path() const { return path_; }
  ModelFormat format() const { return format_; }
  size_t size() const { return bytes_->size(); }
  // Valid while this ModelFile (or a copy of it) lives.
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> reader() const;

 private:
  ModelFile(std::string path, std::shared_ptr<const std::string> bytes, ModelFormat format)
      : path_(std::move(path)), bytes_(std::move(bytes)), format_(format) {}
  std::string path_;
  std::shared_ptr<const std::string> bytes_;
  ModelFormat format_;
};

}  // namespace torchmt
