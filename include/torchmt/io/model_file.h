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

#include <c10/core/Allocator.h>

namespace c10 {
struct IValue;
}
namespace at {
class Tensor;
}
namespace caffe2::serialize {
class ReadAdapterInterface;
}

namespace torchmt {

enum class ModelFormat { kCheckpoint, kTorchScriptExport };
const char* model_format_name(ModelFormat format);  // "checkpoint" | "TorchScript export"

class MappedFile;

// Whether `t`'s memory is a model file's mapped pages (ModelFile::map_record).
bool file_backed(const at::Tensor& t);
// Moves a file-backed tensor's data into memory of its own (other tensors leave it alone) and
// gives the file's pages back: a long-lived model must not change if its file is overwritten
// in place (an unread page would come from the new file).
void own_file_pages(at::Tensor& t);

class ModelFile {
 public:
  // `what` names the file in errors ("checkpoint", "export"; "model" where either will do).
  static ModelFile read(const std::string& path, const std::string& what = "model");

  const std::string& path() const { return path_; }
  ModelFormat format() const { return format_; }
  size_t size() const;
  // Valid while this ModelFile (or a copy of it) lives.
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> reader() const;

  // A record's data at `offset` of the file as tensor storage, without a copy: the pages are
  // the file's, read-only (a write is a crash, not a change other loads would see; own_file_pages
  // first), and come into memory when read. Null where the data is not 64-byte aligned or not
  // inside the file: read it instead.
  c10::DataPtr map_record(size_t offset) const;
  // After unpickling: every mapped storage in `value` lies inside the file and apart from the
  // others (DamagedFileError otherwise; a hostile archive can claim more elements than its
  // record holds), and gives its pages back when it dies.
  void check_mapped_storages(const c10::IValue& value) const;

 private:
  ModelFile(std::string path, std::shared_ptr<const MappedFile> file, ModelFormat format)
      : path_(std::move(path)), file_(std::move(file)), format_(format) {}
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  ModelFormat format_;
};

}  // namespace torchmt
