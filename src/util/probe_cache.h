#pragma once
// What a speed probe measured on this machine, kept between runs (`--dtype auto` measures
// fp32 against bf16 once per machine and model shape). A tab-separated file of key, value and
// note lines in $TORCHMT_CACHE_DIR, else $XDG_CACHE_HOME/torchmt, else ~/.cache/torchmt; a
// cache that cannot be read or written only means probing again.
#include <optional>
#include <string>

namespace torchmt {

struct ProbeRecord {
  std::string value;  // what was chosen
  std::string note;   // the figures it was chosen by
};

class ProbeCache {
 public:
  // `name`: the file within the cache directory.
  explicit ProbeCache(const std::string& name);
  const std::string& path() const { return path_; }
  std::optional<ProbeRecord> get(const std::string& key) const;
  // Adds or replaces `key`; false when the cache could not be written.
  bool put(const std::string& key, const ProbeRecord& record) const;

  // The machine's part of a key: CPU model, threads in use, LibTorch version.
  static std::string machine_key(int threads);
  // The GPUs' part of a key for work on a GPU: the models the NVIDIA driver lists
  // (/proc/driver/nvidia/gpus), e.g. "NVIDIA H200 x1"; "unknown-gpu" when it lists none.
  static std::string gpu_key();

 private:
  std::string path_;
};

}  // namespace torchmt
