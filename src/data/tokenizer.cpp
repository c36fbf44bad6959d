#include "torchmt/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/text_file.h"
#include "torchmt/util/strings.h"
#include "util/atomic_file.h"
#include "util/child_process.h"

namespace torchmt {


namespace {

// What a serialized ModelProto says of itself, read without SentencePiece's protobuf headers
// (Debian does not install them).
struct ModelFacts {
  bool parsed = false;
  int64_t pieces = 0;
  bool has_trainer = false, has_normalizer = false, hard_limit = true;
  uint64_t vocab_size = 8000;  // TrainerSpec's default
  uint64_t model_type = 1;     // TrainerSpec.ModelType: UNIGRAM 1 (the default), BPE 2, WORD 3, CHAR 4
  // Per piece, whether it is NORMAL (Type 1, the default): not unknown, control, user-defined,
  // unused or byte.
  std::vector<char> normal;
};

ModelFacts read_model_facts(std::string_view proto) {
  auto varint = [&](std::string_view b, size_t& i, uint64_t& value) {
    value = 0;
    for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
      const auto byte = static_cast<uint8_t>(b[i++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) return true;
    }
    return false;
  };
  // Calls field(number, wire_type, varint value or bytes) for each top-level field of `b`.
  auto walk = [&](std::string_view b, auto&& field) {
    for (size_t i = 0; i < b.size();) {
      uint64_t key = 0, value = 0;
      if (!varint(b, i, key)) return false;
      std::string_view bytes;
      switch (key & 7) {
        case 0: if (!varint(b, i, value)) return false; break;
        case 1: if (b.size() - i < 8) return false; i += 8; break;
        case 5: if (b.size() - i < 4) return false; i += 4; break;
        case 2:
          if (!varint(b, i, value) || value > b.size() - i) return false;
          bytes = b.substr(i, value);
          i += value;
          break;
        default: return false;
      }
      field(key >> 3, key & 7, value, bytes);
    }
    return true;
  };
  ModelFacts f;
  f.parsed = walk(proto, [&](uint64_t number, uint64_t, uint64_t, std::string_view bytes) {
    if (number == 1) {
      ++f.pieces;
      uint64_t type = 1;
      walk(bytes, [&](uint64_t n, uint64_t wire, uint64_t value, std::string_view) {
        if (n == 3 && wire == 0) type = value;
      });
      f.normal.push_back(type == 1);
    }
    if (number == 3) f.has_normalizer = true;
    if (number != 2) return;
    f.has_trainer = true;
    walk(bytes, [&](uint64_t n, uint64_t wire, uint64_t value, std::string_view) {
      if (n == 3 && wire == 0) f.model_type = value;
      if (n == 4 && wire == 0) f.vocab_size = value;
      if (n == 33 && wire == 0) f.hard_limit = value != 0;
    });
  });
  return f;
}

// A SentencePiece model cut short at a field boundary still parses (as fewer pieces, or without
// its normaliser) and would encode differently without a word. SentencePiece writes the pieces,
// then trainer_spec, then normalizer_spec; a whole model has both specs and, under the trainer's
// hard vocabulary limit (the default), exactly vocab_size pieces. Returns what is missing, or "".
std::string missing_model_parts(std::string_view proto) {
  const ModelFacts f = read_model_facts(proto);
  if (!f.parsed) return "its fields do not parse";
  if (!f.has_trainer) return "it has no trainer_spec";
  if (!f.has_normalizer) return "it has no normalizer_spec";
  const auto pieces = static_cast<uint64_t>(f.pieces);
  if (f.hard_limit ? pieces != f.vocab_size : pieces > f.vocab_size)
    return "it holds " + std::to_string(f.pieces) + " pieces where its trainer_spec says " + std::to_string(f.vocab_size);
  return "";
}

// Feeds the trainer every line of every input in turn, streaming, so that SentencePiece's own
// reservoir sampling (input_sentence_size) bounds the memory, and .gz needs no temp file.
class FileSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  FileSentenceIterator(std::vector<std::string> paths, std::function<void(int64_t, bool)> lines_read)
      : paths_(std::move(paths)), lines_read_(std::move(lines_read)) {
    advance();
  }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }
  const std::string& error() const { return error_; }
  std::exception_ptr exception() const { return exception_; }

 private:
  void advance() {
    try {
      while (true) {
        if (!reader_) {
          if (next_path_ >= paths_.size()) {
            done_ = true;
            report(true);
            return;
          }
          reader_ = std::make_unique<LineReader>(paths_[next_path_++]);
        }
        if (reader_->next(line_)) {
          if (++unreported_ == kReportEvery) report(false);
          if (!line_.empty()) return;  // empty lines carry nothing to learn from
          continue;
        }
        reader_.reset();
      }
    } catch (const std::exception& e) {
      // Exceptions must not cross SentencePiece's frames: report through status(), rethrown
      // (as they were: a stop request stays one) once SentencePiece has returned.
      exception_ = std::current_exception();
      error_ = e.what();
      status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, error_);
      done_ = true;
    }
  }

  void report(bool done) {
    if (lines_read_) lines_read_(unreported_, done);
    unreported_ = 0;
  }

  static constexpr int64_t kReportEvery = 4096;
  std::vector<std::string> paths_;
  std::function<void(int64_t, bool)> lines_read_;
  int64_t unreported_ = 0;
  size_t next_path_ = 0;
  std::unique_ptr<LineReader> reader_;
  std::exception_ptr exception_;
  std::string line_;
  bool done_ = false;
  std::string error_;
  sentencepiece::util::Status status_;
};

}  // namespace

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::string serialized;
  std::string checksum;
  SpecialIds special;
  // An explicit vocabulary: id -> piece and back; empty: SentencePiece's ids.
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int64_t> ids;
  bool bpe = false;          // a BPE model (not unigram, word or char)
  std::vector<char> normal;  // SentencePiece id -> a NORMAL piece
};

std::vector<std::string> Vocabulary::pieces_from_json(const std::string& json) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("the vocabulary is not JSON: ") + first_line(e.what()));
  }
  if (!parsed.is_array() || parsed.empty()) throw std::runtime_error("the vocabulary is not a non-empty JSON list of pieces");
  std::vector<std::string> pieces;
  pieces.reserve(parsed.size());
  for (const auto& piece : parsed) {
    if (!piece.is_string()) throw std::runtime_error("the vocabulary holds a piece that is not a string");
    pieces.push_back(piece.get<std::string>());
  }
  return pieces;
}

std::string Vocabulary::pieces_to_json(const std::vector<std::string>& pieces) { return nlohmann::json(pieces).dump(); }

namespace {
// SentencePiece's trainer status in one line, without its source location: "[!sentences_.empty()]"
// as what it means.
std::string trainer_message(std::string message) {
  if (message.find("!sentences_.empty()") != std::string::npos) return "the input files hold no text";
  if (const auto at = message.find(".cc("); at != std::string::npos) {
    const auto end = message.find(") ", at);
    if (end != std::string::npos) message.erase(0, end + 2);
  }
  for (auto& c : message)
    if (c == '\n' || c == '\r') c = ' ';
  while (!message.empty() && message.back() == ' ') message.pop_back();
  return message;
}
}  // namespace

void train_bpe_vocab(const VocabTrainingOptions& options) {
  if (options.inputs.empty()) throw std::runtime_error("no input files to train a vocabulary on");
  if (options.model_prefix.empty()) throw std::runtime_error("no output prefix for the vocabulary");
  for (const auto& path : options.inputs) {
    if (!std::filesystem::exists(path)) throw std::runtime_error("input file '" + path + "' not found");
  }
  int threads = options.num_threads > 0 ? options.num_threads : static_cast<int>(std::thread::hardware_concurrency());
  std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"pad_piece", "<pad>"},
      {"unk_piece", "<unk>"},
      {"bos_piece", "<s>"},
      {"eos_piece", "</s>"},
      {"num_threads", std::to_string(std::max(1, threads))},
      {"minloglevel", "1"},  // SentencePiece's INFO lines would drown the CLI's output
  };
  auto train = [&] {
    // Seeds the sampling of input_sentence_size sentences: same seed and input -> same model.
    sentencepiece::SetRandomGeneratorSeed(options.seed);
    FileSentenceIterator sentences(options.inputs, options.lines_read);
    // No model_prefix: the trainer hands back the proto, which then records no output path,
    // so the same data gives byte-identical models (and checksums) wherever they are written.
    std::string proto;
    auto status = sentencepiece::SentencePieceTrainer::Train(args, &sentences, &proto);
    if (sentences.exception()) std::rethrow_exception(sentences.exception());
    if (!status.ok()) throw std::runtime_error("training the vocabulary failed: " + trainer_message(status.message()));
    return proto;
  };
  // SentencePiece's trainer cannot be interrupted: where a stop must be honoured, it runs in a
  // child process that a stop kills.
  const std::string proto =
      options.stop_requested ? run_in_child_process(train, options.stop_requested, "training the vocabulary") : train();

  Tokenizer tok = Tokenizer::from_serialized(proto);
  std::filesystem::path prefix(options.model_prefix);
  if (prefix.has_parent_path()) std::filesystem::create_directories(prefix.parent_path());
  atomic_write(options.model_prefix + ".model", proto);
  // The .vocab file is for people: piece <tab> score, as spm_train writes it.
  std::ostringstream vocab;
  for (int64_t id = 0; id < tok.vocab_size(); ++id) {
    vocab << tok.id_to_piece(id) << "\t" << tok.piece_score(id) << "\n";
  }
  atomic_write(options.model_prefix + ".vocab", vocab.str());
}

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

std::shared_ptr<Tokenizer::Impl> Tokenizer::make_impl(const std::string& proto, const std::string& what,
                                                     bool check_special_ids) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  auto status = impl->sp.LoadFromSerializedProto(proto);
  if (!status.ok()) throw std::runtime_error(what + " is not a SentencePiece model (" + status.message() + ")");
  auto& sp = impl->sp;
  if (check_special_ids && (sp.pad_id() != kPadId || sp.unk_id() != kUnkId || sp.bos_id() != kBosId || sp.eos_id() != kEosId)) {
    throw std::runtime_error(what + " has special ids pad " + std::to_string(sp.pad_id()) + ", unk " +
                             std::to_string(sp.unk_id()) + ", bos " + std::to_string(sp.bos_id()) + ", eos " +
                             std::to_string(sp.eos_id()) +
                             "; torchmt needs pad 0, unk 1, bos 2, eos 3 (train it with 'torchmt vocab')");
  }
  impl->serialized = proto;
  impl->checksum = fnv1a_hex(proto);
  ModelFacts facts = read_model_facts(proto);
  impl->bpe = facts.model_type == 2;
  impl->normal = std::move(facts.normal);
  return impl;
}

Tokenizer Tokenizer::load(const std::string& model_path) {
  // (a directory opens as a stream whose first read throws "basic_filebuf::underflow")
  if (std::filesystem::is_directory(model_path))
    throw std::runtime_error("tokenizer model '" + model_path + "' is a directory, not a SentencePiece model");
  std::ifstream in(model_path, std::ios::binary);
  if (!in) throw std::runtime_error("tokenizer model '" + model_path + "' not found or unreadable");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) throw std::runtime_error("tokenizer model '" + model_path + "' is empty");
  auto impl = make_impl(bytes, "'" + model_path + "'", true);
  check_complete(bytes, "tokenizer model '" + model_path + "'");
  return Tokenizer(std::move(impl));
}

void Tokenizer::check_complete(std::string_view model_proto, const std::string& what) {
  if (const auto missing = missing_model_parts(model_proto); !missing.empty())
    throw std::runtime_error(what + " is incomplete (truncated?): " + missing);
}

Tokenizer Tokenizer::from_serialized(const std::string& model_proto) {
  return Tokenizer(make_impl(model_proto, "the embedded tokenizer model", true));
}

Tokenizer Tokenizer::from_serialized(const std::string& model_proto, Vocabulary vocabulary) {
  auto impl = make_impl(model_proto, "the embedded tokenizer model", false);
  const auto size = static_cast<int64_t>(vocabulary.pieces.size());
  const SpecialIds& s = vocabulary.special;
  for (int64_t id : {s.pad, s.unk, s.bos, s.eos})
    if (id < 0 || id >= size)
      throw std::runtime_error("special id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(size));
  impl->ids.reserve(vocabulary.pieces.size());
  for (int64_t id = 0; id < size; ++id)
    if (!impl->ids.emplace(vocabulary.pieces[static_cast<size_t>(id)], id).second)
      throw std::runtime_error("the vocabulary holds the piece '" + escape_control(vocabulary.pieces[static_cast<size_t>(id)]) +
                               "' twice");
  impl->special = s;
  impl->checksum = fnv1a_hex(model_proto + '\0' + Vocabulary::pieces_to_json(vocabulary.pieces));
  impl->pieces = std::move(vocabulary.pieces);
  return Tokenizer(std::move(impl));
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  if (has_vocabulary()) {
    std::vector<int64_t> ids;
    for (const auto& piece : encode_pieces(text)) ids.push_back(piece_to_id(piece));
    return ids;
  }
  std::vector<int> ids;
  auto status = impl_->sp.Encode(text, &ids);
  if (!status.ok()) throw std::runtime_error("cannot encode text: " + std::string(status.message()));
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::vector<std::string> Tokenizer::encode_pieces(const std::string& text) const {
  std::vector<std::string> pieces;
  auto status = impl_->sp.Encode(text, &pieces);
  if (!status.ok()) throw std::runtime_error("cannot encode text: " + std::string(status.message()));
  return pieces;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  const SpecialIds& s = impl_->special;
  const int64_t size = vocab_size();
  if (has_vocabulary()) {
    std::vector<std::string> pieces;
    for (int64_t id : ids) {
      if (id == s.pad || id == s.bos || id == s.eos) continue;
      pieces.push_back(impl_->pieces[static_cast<size_t>(id >= 0 && id < size ? id : s.unk)]);
    }
    std::string text;
    auto status = impl_->sp.Decode(pieces, &text);
    if (!status.ok()) throw std::runtime_error("cannot decode ids: " + std::string(status.message()));
    // Pieces the target model lacks (the vocabulary serves both sides) come back as they are:
    // their word boundaries become spaces, as Marian's tokenizer does.
    static const std::string kBoundary = "\xe2\x96\x81";  // U+2581
    for (size_t at; (at = text.find(kBoundary)) != std::string::npos;) text.replace(at, kBoundary.size(), " ");
    const size_t first = text.find_first_not_of(' '), last = text.find_last_not_of(' ');
    return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  }
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (int64_t id : ids) {
    if (id == s.pad || id == s.bos || id == s.eos) continue;
    // An id outside the vocabulary (a model trained on another one) decodes as unknown
    // rather than crashing the decoder.
    kept.push_back(static_cast<int>(id >= 0 && id < size ? id : kUnkId));
  }
  std::string text;
  auto status = impl_->sp.Decode(kept, &text);
  if (!status.ok()) throw std::runtime_error("cannot decode ids: " + std::string(status.message()));
  return text;
}

std::string Tokenizer::id_to_piece(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary of " +
                            std::to_string(vocab_size()));
  }
  if (has_vocabulary()) return impl_->pieces[static_cast<size_t>(id)];
  return impl_->sp.IdToPiece(static_cast<int>(id));
}

int64_t Tokenizer::piece_to_id(const std::string& piece) const {
  if (!has_vocabulary()) return impl_->sp.PieceToId(piece);
  const auto it = impl_->ids.find(piece);
  return it == impl_->ids.end() ? impl_->special.unk : it->second;
}

float Tokenizer::piece_score(int64_t id) const {
  if (id < 0 || id >= vocab_size()) throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary");
  if (has_vocabulary()) return impl_->sp.GetScore(impl_->sp.PieceToId(impl_->pieces[static_cast<size_t>(id)]));
  return impl_->sp.GetScore(static_cast<int>(id));
}

int64_t Tokenizer::vocab_size() const {
  return has_vocabulary() ? static_cast<int64_t>(impl_->pieces.size()) : impl_->sp.GetPieceSize();
}

const SpecialIds& Tokenizer::special_ids() const { return impl_->special; }

bool Tokenizer::has_vocabulary() const { return !impl_->pieces.empty(); }

bool Tokenizer::is_bpe() const { return impl_->bpe; }

bool Tokenizer::is_normal_piece(int64_t id) const {
  if (has_vocabulary()) {
    if (id < 0 || id >= vocab_size()) return false;
    id = impl_->sp.PieceToId(impl_->pieces[static_cast<size_t>(id)]);
  }
  return id >= 0 && static_cast<size_t>(id) < impl_->normal.size() && impl_->normal[static_cast<size_t>(id)] != 0;
}

std::string pair_checksum(const Tokenizer& source, const Tokenizer& target) {
  return source.checksum() == target.checksum() ? source.checksum()
                                                : fnv1a_hex(source.checksum() + '\n' + target.checksum());
}

const std::string& Tokenizer::serialized() const { return impl_->serialized; }

std::string Tokenizer::checksum() const { return impl_->checksum; }

}  // namespace torchmt
