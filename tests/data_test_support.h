#pragma once
// Shared by the data tests: the bundled sample and a BPE model trained on it once per run.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "test_support.h"
#include "data/text_file.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/decoding/translator.h"
#include "io/checkpoint.h"
#include "torchmt/training/train_options.h"

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

// A unigram model on the same sample (what BPE-only features must refuse), trained on first use.
inline const std::string& sample_unigram_spm_path() {
  static TempDir dir;
  static const std::string path = [] {
    VocabTrainingOptions o;
    o.inputs = {sample_de(), sample_en()};
    o.model_prefix = dir.file("unigram");
    o.vocab_size = kSampleVocabSize;
    o.model_type = "unigram";
    train_bpe_vocab(o);
    return o.model_prefix + ".model";
  }();
  return path;
}

inline const Tokenizer& sample_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(sample_spm_path());
  return tok;
}

// Where each top-level field of a serialized SentencePiece model ends (its pieces, trainer_spec,
// normalizer_spec: one-byte keys, length-delimited), to cut a model where SentencePiece still
// parses it.
inline std::vector<size_t> spm_field_ends(const std::string& proto) {
  std::vector<size_t> ends;
  for (size_t i = 0; i < proto.size();) {
    ++i;  // the key
    size_t length = 0;
    for (int shift = 0;; shift += 7) {
      const auto byte = static_cast<uint8_t>(proto[i++]);
      length |= static_cast<size_t>(byte & 0x7f) << shift;
      if (byte < 0x80) break;
    }
    i += length;
    ends.push_back(i);
  }
  return ends;
}

// The tiny training run the trainer, integrity and CUDA tests start from: the sample corpus and
// vocabulary, fp32 on one CPU thread, no limits (each test sets its own).
inline TrainOptions tiny_run(const std::string& out, const std::string& src = sample_de(),
                             const std::string& tgt = sample_en()) {
  TrainOptions o;
  o.train_src = src;
  o.train_tgt = tgt;
  o.spm = sample_spm_path();
  o.preset = "tiny";
  o.out = out;
  o.dtype = "fp32";
  o.device = "cpu";
  o.batch_tokens = 600;
  o.lr_factor = 1.0;
  o.warmup = 50;
  o.log_every = 1000;
  o.keep_last = 0;
  o.threads = 1;  // a tiny model gains nothing from more, and a loaded CI machine hurts OpenMP
  return o;
}

// A random tiny model with the sample tokenizer embedded: enough to exercise the CLI.
inline const std::string& tiny_checkpoint() {
  static TempDir dir;
  static const std::string path = [] {
    ModelConfig c = ModelConfig::preset("tiny");
    c.src_vocab_size = c.tgt_vocab_size = sample_tokenizer().vocab_size();
    c.max_positions = 64;
    torch::manual_seed(3);
    Transformer model(c);
    CheckpointMeta meta;
    meta.model = c;
    meta.src_spm_model = meta.tgt_spm_model = sample_tokenizer().serialized();
    meta.src_spm_checksum = meta.tgt_spm_checksum = sample_tokenizer().checksum();
    save_checkpoint(dir.file("tiny.pt"), model, nullptr, meta);
    return dir.file("tiny.pt");
  }();
  return path;
}

// The first n lines of the German sample.
inline std::vector<std::string> sample_lines(size_t n) {
  auto lines = read_lines(sample_de());
  lines.resize(n);
  return lines;
}

// A random tiny model in memory with the sample tokenizer, fp32 on the CPU.
inline Translator random_translator() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = sample_tokenizer().vocab_size();
  c.max_positions = 64;
  torch::manual_seed(9);
  return Translator(Transformer(c), sample_tokenizer(), sample_tokenizer(), torch::kCPU, torch::kFloat);
}

// `got` translates `lines` as `want` does, greedy and beam 4 (4-best), `batch_size` lines a batch:
// the same hypotheses, scores within `tolerance`; `check` (optional) sees each of got's.
inline void expect_same_translations(Translator& want, Translator& got, const std::vector<std::string>& lines,
                                     int64_t batch_size, double tolerance,
                                     const std::function<void(const Hypothesis&)>& check = {}) {
  for (int64_t beam : {1, 4}) {
    TranslationOptions options;
    options.search.beam_size = beam;
    options.search.nbest = beam;
    options.batch_size = batch_size;
    const auto expected = want.translate(lines, options), actual = got.translate(lines, options);
    for (size_t i = 0; i < lines.size(); ++i) {
      ASSERT_EQ(actual[i].hypotheses.size(), expected[i].hypotheses.size()) << "line " << i;
      for (size_t k = 0; k < actual[i].hypotheses.size(); ++k) {
        const Hypothesis &a = actual[i].hypotheses[k], &e = expected[i].hypotheses[k];
        EXPECT_EQ(a.tokens, e.tokens) << "line " << i << " beam " << beam;
        EXPECT_NEAR(a.score, e.score, tolerance) << "line " << i << " beam " << beam;
        if (check) check(a);
      }
    }
  }
}

}  // namespace torchmt::test
