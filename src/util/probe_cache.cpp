#include "util/probe_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <torch/version.h>

#include "util/atomic_file.h"
#include "util/environment.h"

namespace fs = std::filesystem;

namespace torchmt {
namespace {

std::string cache_dir() {
  if (auto d = env_value("TORCHMT_CACHE_DIR")) return *d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0') return std::string(d) + "/torchmt";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/torchmt";
  return "";
}

std::string clean(std::string s) {
  for (auto& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

std::map<std::string, ProbeRecord> read_all(const std::string& path) {
  std::map<std::string, ProbeRecord> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find('\t');
    if (a == std::string::npos) continue;
    const auto b = line.find('\t', a + 1);
    ProbeRecord r;
    r.value = line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    if (b != std::string::npos) r.note = line.substr(b + 1);
    out[line.substr(0, a)] = r;
  }
  return out;
}

}  // namespace

ProbeCache::ProbeCache(const std::string& name) {
  const std::string dir = cache_dir();
  path_ = dir.empty() ? std::string() : dir + "/" + name;
}

std::optional<ProbeRecord> ProbeCache::get(const std::string& key) const {
  if (path_.empty()) return std::nullopt;
  auto all = read_all(path_);
  auto it = all.find(clean(key));
  if (it == all.end() || it->second.value.empty()) return std::nullopt;
  return it->second;
}

bool ProbeCache::put(const std::string& key, const ProbeRecord& record) const {
  if (path_.empty()) return false;
  try {
    std::error_code ec;
    fs::create_directories(fs::path(path_).parent_path(), ec);
    auto all = read_all(path_);
    all[clean(key)] = ProbeRecord{clean(record.value), clean(record.note)};
    std::ostringstream text;
    for (const auto& [k, r] : all) text << k << '\t' << r.value << '\t' << r.note << '\n';
    atomic_write(path_, text.str());
    return true;
  } catch (const std::exception&) {
    return false;  // a read-only home: probe again next time
  }
}

std::string ProbeCache::gpu_key() {
  std::map<std::string, int> models;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::ifstream info(gpu.path() / "information");
    for (std::string line; std::getline(info, line);) {
      if (line.rfind("Model:", 0) != 0) continue;
      const auto start = line.find_first_not_of(" \t", 6);
      ++models[start == std::string::npos ? "gpu" : line.substr(start)];
      break;
    }
  }
  std::string key;
  for (const auto& [model, count] : models) key += (key.empty() ? "" : ", ") + clean(model) + " x" + std::to_string(count);
  return key.empty() ? "unknown-gpu" : key;
}

std::string ProbeCache::machine_key(int threads) {
  std::string cpu = "unknown-cpu";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) cpu = line.substr(colon + 2);
      break;
    }
  }
  return clean(cpu) + "|threads=" + std::to_string(threads) + "|libtorch=" + TORCH_VERSION;
}

}  // namespace torchmt
