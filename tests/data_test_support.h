#pragma once
// Shared by the data tests: the bundled sample and a BPE model trained on it once per run.
#include <string>

#include "test_support.h"
#include "torchmt/data/tokenizer.h"

namespace torchmt::test {

inline std::string sample_de() { return source_dir() + "/data/sample.de"; }
inline std::string sample_en() { return source_dir() + "/data/sample.en"; }

// Small enough to train in well under a second on the ~400-pair sample.
constexpr int kSampleVocabSize = 400;

// A joint model on data/sample.{de,en}, trained on first use and kept for the whole run;
// returns the path of its .model file.
inline const std::string& sample_spm_path() {
  static TempDir dir;
  static const std::string path = [] {
    VocabTrainingOptions o;
    o.inputs = {sample_de(), sample_en()};
    o.model_prefix = dir.file("sample");
    o.vocab_size = kSampleVocabSize;
    train_bpe_vocab(o);
    return o.model_prefix + ".model";
  }();
  return path;
}

inline const Tokenizer& sample_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(sample_spm_path());
  return tok;
}

}  // namespace torchmt::test
