#pragma once
// The files /translate_file has translated, kept in memory until fetched from
// /download_file/<id>/<name> (LibreTranslate's translatedFileUrl): bounded in count and bytes (the
// oldest go first) and in time, so a server under file traffic does not grow.
// Light header: no LibTorch.
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

namespace torchmt {

struct TranslatedFile {
  std::string id;    // 32 hex digits from the system's random source: not guessable
  std::string name;  // the file name the client gets
  std::string content_type;
  std::string bytes;
  std::chrono::steady_clock::time_point stored;
};

class TranslatedFiles {
 public:
  TranslatedFiles(size_t max_files, size_t max_bytes, std::chrono::seconds lifetime)
      : max_files_(max_files), max_bytes_(max_bytes), lifetime_(lifetime) {}
  // Keeps a file; returns its id. Older files go when the bounds are reached.
  std::string put(std::string name, std::string content_type, std::string bytes);
  // The file of `id` and `name`, while it is kept.
  std::optional<TranslatedFile> get(const std::string& id, const std::string& name);

 private:
  void expire_locked(std::chrono::steady_clock::time_point now);
  const size_t max_files_, max_bytes_;
  const std::chrono::seconds lifetime_;
  std::mutex mutex_;
  std::deque<TranslatedFile> files_;  // oldest first
  size_t bytes_ = 0;
};

}  // namespace torchmt
