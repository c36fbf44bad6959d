#pragma once
// Shared by the libFuzzer targets in tests/fuzz/ (README "Fuzzing"): the check that turns a
// broken invariant into a finding, the one-line-error rule, a scratch directory for targets
// that read files, and the sample vocabulary.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>

#include "torchmt/data/tokenizer.h"
#include "util/atomic_file.h"

// A broken invariant is a crash, which is what libFuzzer (and the replay driver) report.
#define FUZZ_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

namespace torchmt::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// What every refusal must look like to a user: one non-empty line.
inline void check_error_message(const std::exception& e) {
  const std::string message = e.what();
  if (message.empty() || message.find('\n') != std::string::npos) {
    std::fprintf(stderr, "error message is not one line: [%s]\n", message.c_str());
    std::abort();
  }
}

// A directory of this process, removed at exit; in /dev/shm when there is one (a file is
// written per execution).
inline const std::string& scratch_dir() {
  struct Dir {
    std::string path;
    Dir() {
      std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
      std::string pattern = base + "/torchmt_fuzz_XXXXXX";
      if (!mkdtemp(pattern.data())) {
        std::perror("mkdtemp");
        std::abort();
      }
      path = pattern;
    }
    ~Dir() { remove_tree(path); }
  };
  static Dir dir;
  return dir.path;
}

inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// A BPE model trained once per process on data/sample.{de,en} (well under a second).
inline const Tokenizer& sample_tokenizer() {
  static const Tokenizer tok = [] {
    VocabTrainingOptions o;
    o.inputs = {std::string(TORCHMT_SOURCE_DIR) + "/data/sample.de", std::string(TORCHMT_SOURCE_DIR) + "/data/sample.en"};
    o.model_prefix = scratch_dir() + "/sample";
    o.vocab_size = 400;
    o.num_threads = 1;
    train_bpe_vocab(o);
    return Tokenizer::load(o.model_prefix + ".model");
  }();
  return tok;
}

}  // namespace torchmt::fuzz
