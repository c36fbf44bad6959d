#pragma once
// SentencePiece BPE: training a vocabulary and the Tokenizer that wraps a trained model.
// The SentencePiece headers stay in src/data/tokenizer.cpp (pimpl).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "torchmt/data/special_ids.h"

namespace torchmt {

struct VocabTrainingOptions {
  std::vector<std::string> inputs;  // plain or .gz text files, one sentence per line
  std::string model_prefix;         // writes <prefix>.model and <prefix>.vocab
  int vocab_size = 8000;
  // Sentences sampled from the inputs (reservoir sampling), so a large corpus does not
  // exhaust memory; sampling is seeded, so training stays deterministic.
  int64_t input_sentence_size = 2000000;
  uint32_t seed = 1;
  double character_coverage = 1.0;  // 1.0: every character of the input gets a piece
  std::string model_type = "bpe";
  int num_threads = 0;  // 0: hardware concurrency
  // Called with the count of lines read since the last call, every few thousand lines, and
  // with `done` true once the inputs are read (training the pieces comes after). What it throws
  // ends the training (reading stops) and is rethrown by train_bpe_vocab.
  std::function<void(int64_t lines, bool done)> lines_read;
  // Set: the training runs in a child process, and this turning true ends it within about 0.1 s
  // (StopRequested, nothing written), pieces' training included, which SentencePiece cannot
  // interrupt. lines_read then runs in that process. Unset: the training runs in this one.
  std::function<bool()> stop_requested;
};

// Trains with the SentencePiece C++ trainer API, special ids pad 0, unk 1, bos 2, eos 3.
// Same options and inputs -> byte-identical model. Throws std::runtime_error naming the
// input or output file on failure.
void train_bpe_vocab(const VocabTrainingOptions& options);

// An explicit vocabulary (Marian's vocab.json): the model's ids are positions in `pieces`, not
// SentencePiece's ids; a piece it lacks encodes as `special.unk`. One vocabulary may serve
// separate source and target SentencePiece models over one shared embedding.
struct Vocabulary {
  std::vector<std::string> pieces;  // id -> piece
  SpecialIds special;
  // A JSON array of the pieces (how checkpoints and exports store them); throws
  // std::runtime_error on anything else, on duplicates, or on an empty list.
  static std::vector<std::string> pieces_from_json(const std::string& json);
  static std::string pieces_to_json(const std::vector<std::string>& pieces);
};

class Tokenizer {
 public:
  // Throws std::runtime_error naming the file when it is missing, not a SentencePiece
  // model, or its special ids are not pad 0, unk 1, bos 2, eos 3.
  static Tokenizer load(const std::string& model_path);
  // For models embedded in checkpoints and exports.
  static Tokenizer from_serialized(const std::string& model_proto);
  // Throws std::runtime_error "WHAT is incomplete (truncated?): ..." when a model that
  // SentencePiece parses lacks its trainer_spec or normalizer_spec, or pieces its trainer_spec
  // promised: a file cut where one of its fields ends. load() checks its file with it.
  static void check_complete(std::string_view model_proto, const std::string& what);
  // Over an explicit vocabulary: SentencePiece only splits and joins pieces; its special ids
  // are not checked (the vocabulary's are used).
  static Tokenizer from_serialized(const std::string& model_proto, Vocabulary vocabulary);

  // Ids without bos/eos.
  std::vector<int64_t> encode(const std::string& text) const;
  std::vector<std::string> encode_pieces(const std::string& text) const;
  // pad, bos and eos are skipped, so a padded or complete hypothesis decodes as is.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string id_to_piece(int64_t id) const;
  int64_t piece_to_id(const std::string& piece) const;  // special_ids().unk when absent
  float piece_score(int64_t id) const;
  int64_t vocab_size() const;
  const SpecialIds& special_ids() const;
  bool has_vocabulary() const;  // an explicit Vocabulary (else SentencePiece's ids)
  bool is_bpe() const;          // a BPE model (SentencePiece's model_type), not unigram
  // A piece of text (SentencePiece's NORMAL type): not unknown, control, user-defined or byte.
  bool is_normal_piece(int64_t id) const;

  const std::string& serialized() const;  // the model proto bytes
  // 16 hex digits, FNV-1a 64 of serialized() (and of the explicit vocabulary's pieces).
  std::string checksum() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  static std::shared_ptr<Impl> make_impl(const std::string& proto, const std::string& what, bool check_special_ids);
  std::shared_ptr<const Impl> impl_;  // shared: copies are cheap, the model is immutable
};

// What a corpus encoded with a source and a target tokenizer is keyed by: the tokenizer's
// checksum when both are one (a joint vocabulary), else one of both.
std::string pair_checksum(const Tokenizer& source, const Tokenizer& target);

}  // namespace torchmt
