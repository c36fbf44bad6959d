#pragma once
// A model file opened once: mapped, its seal (checksum) verified before any parser sees a byte, and what it is told from the archive's records, not from its name. Checkpoints
// (io/checkpoint.h) and TorchScript exports (loading/exported_model.h) are read from it; an
// imported model (`torchmt import`) is a checkpoint.
//
//   ModelFile file = ModelFile::read(path);   // throws std::runtime_error naming path:
//                                             // not found, damaged, unsealed, not a zip
//   file.format()    kCheckpoint | kTorchScriptExport
//   file.reader()    LibTorch's zip reader interface over the mapping (reads clamped to it; the
//                    pages it has read go back, so the file does not stay in memory beside the
//                    tensors made from it)
#include <memory>
#include <string>

namespace caffe2::serialize {
class ReadAdapterInterface;
}

namespace torchmt {

enum class ModelFormat { kCheckpoint, kTorchScriptExport };
const char* model_format_name(ModelFormat format);  // "checkpoint" | "TorchScript export"

class MappedFile;

class ModelFile {
 public:
  // `what` names the file in errors ("checkpoint", "export"; "model" where either will do).
  static ModelFile read(const std::string& path, const std::string& what = "model");

  const std::string& path() const { return path_; }
  ModelFormat format() const { return format_; }
  size_t size() const;
  // Valid while this ModelFile (or a copy of it) lives.
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> reader() const;

 private:
  ModelFile(std::string path, std::shared_ptr<const MappedFile> file, ModelFormat format)
      : path_(std::move(path)), file_(std::move(file)), format_(format) {}
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  ModelFormat format_;
};

}  // namespace torchmt
