#include "serving/translated_files.h"

#include <random>

namespace torchmt {

std::string TranslatedFiles::put(std::string name, std::string content_type, std::string bytes) {
  static const char* const kHex = "0123456789abcdef";
  std::random_device random;
  std::string id;
  for (int i = 0; i < 32; ++i) id += kHex[random() % 16];
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  bytes_ += bytes.size();
  files_.push_back({id, std::move(name), std::move(content_type), std::move(bytes), now});
  expire_locked(now);
  return id;
}

std::optional<TranslatedFile> TranslatedFiles::get(const std::string& id, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  expire_locked(std::chrono::steady_clock::now());
  for (const auto& f : files_)
    if (f.id == id && f.name == name) return f;
  return std::nullopt;
}

void TranslatedFiles::expire_locked(std::chrono::steady_clock::time_point now) {
  // The newest file stays whatever its size (the request's own limit bounded it).
  while (files_.size() > 1 && (files_.size() > max_files_ || bytes_ > max_bytes_ || now - files_.front().stored > lifetime_)) {
    bytes_ -= files_.front().bytes.size();
    files_.pop_front();
  }
  if (!files_.empty() && now - files_.front().stored > lifetime_) {
    bytes_ -= files_.front().bytes.size();
    files_.pop_front();
  }
}

}  // namespace torchmt
