#pragma once
// Helpers shared by the test files: devices to run on, temp dirs, running commands,
// and exchanging tensors with the Python oracle (torch.save / torch.load format).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>

#include <torch/torch.h>

#include "util/atomic_file.h"

namespace torchmt::test {

inline std::string source_dir() { return TORCHMT_SOURCE_DIR; }
inline std::string torchmt_binary() { return TORCHMT_BINARY; }
inline std::string python() { return TORCHMT_PYTHON; }

// Skips the current test when CUDA is not available.
#define TORCHMT_SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

// Sets a variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A fresh directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("torchmt_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    remove_tree(path_.string());
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A fixture built once for every test process of this test binary (ctest runs each test in a
// process of its own): `build(dir)` fills a fresh directory the first time; the others wait for it
// (a lock) and get the same directory. Keyed by the binary's build, so a rebuilt suite builds anew.
inline std::string shared_fixture(const std::string& name, const std::function<void(const std::string&)>& build) {
  namespace fs = std::filesystem;
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  const auto stamp = std::to_string(fs::last_write_time(exe).time_since_epoch().count());
  const fs::path root = fs::path(torchmt_binary()).parent_path() / "test_fixtures" / exe.filename();
  const fs::path dir = root / stamp / name;
  const fs::path done = dir / ".complete";
  if (fs::exists(done)) return dir.string();
  fs::create_directories(root / stamp);
  const std::string lock_path = (root / stamp / (name + ".lock")).string();
  const int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0 || ::flock(fd, LOCK_EX) != 0) throw std::runtime_error("shared_fixture: cannot lock " + lock_path);
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{fd};
  if (fs::exists(done)) return dir.string();
  for (const auto& old : fs::directory_iterator(root))  // fixtures of earlier builds
    if (old.path().filename() != stamp) remove_tree(old.path().string());
  remove_tree(dir.string());
  fs::create_directories(dir);
  build(dir.string());
  std::ofstream(done.string()) << "complete\n";
  return dir.string();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.output.append(buffer, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The message of what `f` throws (any std::exception), "" when it throws nothing.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Writes a {name: tensor or string} dict that Python's torch.load reads.
inline void save_for_python(const std::string& path, const std::map<std::string, c10::IValue>& items) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [k, v] : items) dict.insert(k, v);
  auto bytes = torch::pickle_save(c10::IValue(dict));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Reads a {name: tensor} dict written by Python's torch.save.
inline std::map<std::string, torch::Tensor> load_from_python(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto dict = torch::pickle_load(bytes).toGenericDict();
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : dict) out[item.key().toStringRef()] = item.value().toTensor();
  return out;
}

// Every parameter and buffer, by the state-dict key.
inline std::map<std::string, c10::IValue> state_items(const torch::nn::Module& module) {
  std::map<std::string, c10::IValue> items;
  for (const auto& p : module.named_parameters()) items["state." + p.key()] = p.value().detach().clone();
  for (const auto& b : module.named_buffers()) items["state." + b.key()] = b.value().detach().clone();
  return items;
}

}  // namespace torchmt::test
