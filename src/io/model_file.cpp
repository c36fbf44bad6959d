#include "torchmt/io/model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <caffe2/serialize/inline_container.h>

#include "util/integrity.h"
#include "torchmt/util/strings.h"

namespace torchmt {

// The file mapped read-only, so that a model costs this process its tensors and not its file
// as well (a 191 MB base model's peak was 191 MB higher when the file was read whole). Pages
// the checksum or LibTorch's reader are done with are given back (MADV_DONTNEED: the kernel's
// page cache keeps them, this process's resident set does not; a later read maps them again).
class MappedFile {
 public:
  MappedFile(const std::string& path, const std::string& what) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot read " + what + " " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("cannot read " + what + " " + path + ": " + std::strerror(error));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int error = errno;
      ::close(fd);
      if (p == MAP_FAILED) throw std::runtime_error("cannot read " + what + " " + path + ": " + std::strerror(error));
      data_ = static_cast<const char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {data_ ? data_ : "", size_}; }
  // Gives back the whole pages inside `range` (a part of bytes()).
  void release(std::string_view range) const {
    static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(range.data()) + page - 1) & ~(page - 1);
    const auto end = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) & ~(page - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
  // Gives back every page of the mapping, its last partial one too.
  void release_all() const {
    if (data_) ::madvise(const_cast<char*>(data_), size_, MADV_DONTNEED);
  }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

namespace {

// LibTorch's zip reader over the mapping, reads clamped to the file (BoundedReader's rule);
// each record is read once into its tensor's storage, so its pages go back once copied.
class MappedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit MappedReader(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {}
  size_t size() const override { return file_->bytes().size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/ = "") const override {
    const std::string_view bytes = file_->bytes();
    if (pos >= bytes.size()) return 0;
    n = std::min<size_t>(n, bytes.size() - pos);
    std::memcpy(buf, bytes.data() + pos, n);
    file_->release(bytes.substr(pos, n));
    return n;
  }

 private:
  std::shared_ptr<const MappedFile> file_;
};

// A mapped record's storage: the file it keeps mapped, and the bytes its pages go back from
// once checked (check_mapped_storages; none before, so a failed load releases nothing twice).
struct MappedStorage {
  std::shared_ptr<const MappedFile> file;
  size_t offset = 0;
  size_t size = 0;
};

void release_mapped_storage(void* context) {
  auto* m = static_cast<MappedStorage*>(context);
  if (m->size > 0) m->file->release(m->file->bytes().substr(m->offset, m->size));
  delete m;
}

}  // namespace

bool file_backed(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.storage().data_ptr().get_deleter() == &release_mapped_storage;
}

void own_file_pages(at::Tensor& t) {
  if (!file_backed(t)) return;
  at::NoGradGuard no_grad;
  const std::shared_ptr<const MappedFile> file = static_cast<const MappedStorage*>(t.storage().data_ptr().get_context())->file;
  at::Tensor copy = at::empty_like(t, at::MemoryFormat::Preserve);  // [same shape]
  if (t.is_contiguous() && copy.is_contiguous()) {
    // In slices, every page of the file given back after each: a read maps the page cache's whole
    // folio around it, so one copy of a 32 MB embedding held 85 MB of the file (base model).
    constexpr int64_t kSliceBytes = 4 << 20;
    const int64_t n = t.numel(), step = std::max<int64_t>(1, kSliceBytes / static_cast<int64_t>(t.element_size()));
    at::Tensor from = t.view({-1}), to = copy.view({-1});  // [numel] each
    for (int64_t i = 0; i < n; i += step) {
      const int64_t len = std::min(step, n - i);
      to.narrow(0, i, len).copy_(from.narrow(0, i, len));
      file->release_all();
    }
  } else {
    copy.copy_(t);
    file->release_all();
  }
  t.set_data(copy);  // the mapped storage dies with its last tensor, and its pages go back
}

c10::DataPtr ModelFile::map_record(size_t offset) const {
  const std::string_view bytes = file_->bytes();
  if (offset >= bytes.size() || reinterpret_cast<uintptr_t>(bytes.data() + offset) % 64 != 0) return {};
  auto* context = new MappedStorage{file_, offset, 0};
  return c10::DataPtr(const_cast<char*>(bytes.data() + offset), context, &release_mapped_storage, c10::Device(c10::kCPU));
}

void ModelFile::check_mapped_storages(const c10::IValue& value) const {
  std::vector<std::pair<MappedStorage*, size_t>> mapped;  // (its context, its bytes)
  std::unordered_set<MappedStorage*> seen;
  value.visit([&](const c10::IValue& v) {
    if (v.isTensor() && file_backed(v.toTensor())) {
      const c10::Storage& storage = v.toTensor().storage();
      auto* m = static_cast<MappedStorage*>(storage.data_ptr().get_context());
      if (seen.insert(m).second) mapped.emplace_back(m, storage.nbytes());
    }
    return false;
  });
  std::sort(mapped.begin(), mapped.end(), [](const auto& a, const auto& b) { return a.first->offset < b.first->offset; });
  size_t end = 0;
  for (const auto& [m, n] : mapped) {
    if (m->offset < end || n > size() - m->offset)
      throw DamagedFileError("checkpoint " + path_ + " is corrupt (a tensor claims bytes its record does not hold)");
    end = m->offset + n;
  }
  for (const auto& [m, n] : mapped) m->size = n;
}

const char* model_format_name(ModelFormat format) {
  return format == ModelFormat::kTorchScriptExport ? "TorchScript export" : "checkpoint";
}

ModelFile ModelFile::read(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw std::runtime_error(what + " not found: " + path);
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error(what + " " + path + " is a directory");
  auto file = std::make_shared<const MappedFile>(path, what);
  // Before LibTorch's zip reader sees a byte.
  check_zip_seal(file->bytes(), what, path, [&file](std::string_view chunk) { file->release(chunk); });
  // The exporter writes its marker as an extra file; a checkpoint has none (and says what it is
  // in its own pickled dictionary, which io/checkpoint.cpp checks).
  ModelFormat format = ModelFormat::kCheckpoint;
  try {
    caffe2::serialize::PyTorchStreamReader zip(std::make_shared<MappedReader>(file));
    if (zip.hasRecord("extra/torchmt.json")) format = ModelFormat::kTorchScriptExport;
  } catch (const c10::Error& e) {
    throw DamagedFileError(what + " " + path + " is corrupt (" + first_line(e.what_without_backtrace()) + ")");
  }
  return ModelFile(path, std::move(file), format);
}

std::shared_ptr<caffe2::serialize::ReadAdapterInterface> ModelFile::reader() const {
  return std::make_shared<MappedReader>(file_);
}

size_t ModelFile::size() const { return file_->bytes().size(); }

}  // namespace torchmt
