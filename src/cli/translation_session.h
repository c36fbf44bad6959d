#pragma once
// What `translate` and `evaluate -m` share: the decoding flags, opening a model (a native
// checkpoint or a TorchScript export), and reading input lines strictly.
#include <memory>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "torchmt/decoding/translator.h"

namespace torchmt::cli {

void add_translation_flags(cxxopts::Options& options);

class TranslationSession {
 public:
  // Reads -m and the decoding flags; throws std::invalid_argument for bad flag values and
  // std::runtime_error for unreadable models.
  explicit TranslationSession(const cxxopts::ParseResult& flags);
  ~TranslationSession();

  std::vector<Translation> translate(const std::vector<std::string>& lines);
  Translator& translator() { return *translator_; }
  const TranslationOptions& options() const { return options_; }

 private:
  TranslationOptions options_;
  std::unique_ptr<Translator> translator_;  // a checkpoint's or an export's: one search for both
};

// Lines of a file (plain or .gz), or of stdin for "-"; invalid UTF-8 is an error naming
// the source and the line.
std::vector<std::string> read_input_lines(const std::string& path);

}  // namespace torchmt::cli
