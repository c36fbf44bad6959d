#pragma once
// Translator: the facade users and the trainer call (CTranslate2's Translator). Raw text in,
// raw text out: tokenizes with the model's SentencePiece model(s), sorts sentences by length
// into batches, runs greedy or beam search with the KV cache under the requested precision,
// detokenizes and restores input order. An empty line translates to an empty line.
//
// One Translator and one search for every model format: a format provides an
// IncrementalDecoder (TransformerDecoder for a native model, torchmt/loading's decoder over
// an exported module's step methods) and the ModelConfig; load_translator() in
// torchmt/loading/model_loader.h opens a file of either format.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "torchmt/data/language_identifier.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/decoding/search.h"
#include "torchmt/model/transformer.h"

namespace torchmt {

class WorkerPool;
class Shortlist;
class OutputLanguages;

// What a caller asks of one line beyond the options (the search's SentenceSteering, as text).
struct LineSteering {
  std::string target_prefix;  // the translation starts with it (tokenized by the target model)
  // Sampling's random stream; -1: the line's number (TranslationOptions::first_line + index).
  int64_t stream = -1;
  // Target phrases the translation must hold (terminology), each tokenized by the target model.
  std::vector<std::string> constraints = {};
};

struct Translation {
  std::vector<Hypothesis> hypotheses;  // best first, up to nbest
  std::vector<std::string> texts;      // detokenized hypotheses
  std::vector<std::string> source_pieces;
  bool truncated = false;              // source (or target prefix) longer than the model accepts: cut
};

// A given target's log-probability under the model (Translator::score).
struct PairScore {
  std::vector<int64_t> tokens;  // the target's pieces (ids), without eos
  std::vector<float> log_probs;  // one per token, then eos's
  double log_prob = 0.0;         // their sum, as beam search sums a hypothesis's
  double score = 0.0;            // log_prob / the search's length penalty, as translate() scores
  bool truncated = false;        // source or target longer than the model accepts (cut)
};

// How translate() runs its batches: `workers` threads each decode whole batches (each with
// its own decoder and cache), each with `threads_per_worker` threads inside its operations
// (CTranslate2's inter_threads x intra_threads).
struct WorkerPlan {
  int64_t workers = 1;
  int64_t threads_per_worker = 1;
};

// Makes a decoder for one translate() call; `use_cache` false asks for prefix recomputation
// (formats that cannot recompute throw std::invalid_argument).
using DecoderFactory = std::function<std::unique_ptr<IncrementalDecoder>(bool use_cache)>;

class Translator {
 public:
  Translator(Transformer model, Tokenizer src_tokenizer, Tokenizer tgt_tokenizer, c10::Device device,
             c10::ScalarType dtype);
  // Any model behind the decoder interface; `config` gives max_positions and pad_id.
  Translator(DecoderFactory make_decoder, ModelConfig config, Tokenizer src_tokenizer, Tokenizer tgt_tokenizer,
             c10::Device device, c10::ScalarType dtype);
  // Output in input order, whatever the number of workers (options.workers; 0 = plan_workers).
  // Several threads may call it at once with options.workers 1 (a server's workers), once the
  // model is in eval mode (it is after the first call).
  // `done`, if given, is called with each batch's line count as it finishes (from the workers'
  // threads: it must be thread-safe), e.g. Progress::add. `steering`: one per line, or empty.
  std::vector<Translation> translate(const std::vector<std::string>& lines, const TranslationOptions& options,
                                     const std::function<void(int64_t)>& done = {},
                                     const std::vector<LineSteering>& steering = {});
  // Forced decoding of given pairs (CTranslate2's score_batch, fairseq's --score-reference):
  // line i's target scored as a translation of source line i, batched and on the workers as
  // translate() runs; options.search.length_penalty normalises `score`. The score of a
  // hypothesis translate() found equals the score it reported. std::invalid_argument when the
  // counts differ.
  std::vector<PairScore> score(const std::vector<std::string>& sources, const std::vector<std::string>& targets,
                               const TranslationOptions& options, const std::function<void(int64_t)>& done = {});
  // The same for targets given as ids of the target vocabulary (without bos or eos): a
  // hypothesis's own pieces, which its text may not tokenize back to.
  std::vector<PairScore> score_tokens(const std::vector<std::string>& sources,
                                      std::vector<std::vector<int64_t>> targets, const TranslationOptions& options,
                                      const std::function<void(int64_t)>& done = {});
  // The workers and threads translate() uses for a job of `batches` batches: the options' values
  // where set, else one single-threaded worker per CPU thread (at most one per batch); on CUDA,
  // one worker. Under a runtime with a thread plan (Runtime::inter_threads), at most its workers.
  WorkerPlan plan_workers(const TranslationOptions& options, size_t batches) const;
  // The CPU threads translate() may use when the options leave it open (at::get_num_threads()
  // of the thread that made the translator, until set). n >= 1.
  void set_cpu_threads(int64_t n);
  // The kernels' settings (instruction set, switches) of everything this translator runs, on
  // whichever thread: its batches, its alignments, the server's steps (TranslationService),
  // weights prepared after it is set; and its thread plan (Runtime::inter_threads). Unset: the
  // process's (kernels/runtime.h). Validates (std::invalid_argument).
  void set_runtime(const Runtime& runtime);
  const std::optional<Runtime>& runtime() const { return runtime_; }
  // Best hypothesis text per line: the common case.
  std::vector<std::string> translate_text(const std::vector<std::string>& lines, const TranslationOptions& options);

  // Cross-attention weights [T, S] (target pieces x source pieces, eos included on both
  // sides) of `layer` (-1 = last), averaged over heads or of one `head` (>= 0), for the
  // given source line and its translation. Needs a native model (std::runtime_error otherwise).
  at::Tensor cross_attention(const std::string& source, const std::vector<int64_t>& target_ids, int64_t layer,
                             int64_t head);

  // The cross-attention weights of every decoder layer, each [B, H, T + 1, S] float on the CPU,
  // for sources (encode_source's ids) and targets (ids without bos or eos) padded into one
  // batch: row r is the decoder's input r (bos, then the targets), which predicts target r.
  // Needs a native model (std::runtime_error otherwise).
  std::vector<at::Tensor> cross_attention_weights(const std::vector<const std::vector<int64_t>*>& sources,
                                                  const std::vector<const std::vector<int64_t>*>& targets);

  // Source ids as the model sees them: pieces + eos, cut to the model's max length.
  std::vector<int64_t> encode_source(const std::string& line, bool* truncated = nullptr) const;

  // The pieces of translate() for callers that drive a search themselves (the server's
  // in-flight batching), so that they give translate()'s strings:
  // a line translate() passes through as an empty line;
  static bool is_blank(const std::string& line);
  // a decoder as translate()'s workers get (call from one thread at a time: it may put a
  // native model in eval mode);
  std::unique_ptr<IncrementalDecoder> make_decoder(bool use_cache) const { return make_decoder_(use_cache); }
  // the search settings with the model's special ids and length cap;
  SearchOptions search_options(const TranslationOptions& options) const;
  // sources (encode_source's ids) padded into one batch [n, S] on the device;
  at::Tensor source_batch(const std::vector<const std::vector<int64_t>*>& rows) const;
  // the texts of t's hypotheses (one empty text when it has none);
  void finish(Translation& t) const;
  // what the search is asked for a line: its target prefix's ids, its vocabulary (a shortlist's,
  // and a --both-directions model's language: OutputLanguages) and sampling's stream (the line's
  // number in the whole input);
  SentenceSteering steer(const std::vector<int64_t>& source_ids, const LineSteering& line, int64_t stream) const;
  // whether steer() restricts every line's vocabulary, asked or not.
  bool restricts_output() const { return shortlist_ || output_languages_; }

  // Output vocabulary shortlist for every translation (null: none). Throws std::invalid_argument
  // when its target vocabulary is not the model's size.
  void set_shortlist(std::shared_ptr<const Shortlist> shortlist);
  const std::shared_ptr<const Shortlist>& shortlist() const { return shortlist_; }

  // What the model translates from and into, and its language identifier, as its file recorded
  // them (the loader sets them; empty for a model that recorded none).
  // A --both-directions model that records each way's columns keeps every translation to the
  // columns of the language it translates into; any other checkpoint whose output layer has
  // columns closed (train --output-columns corpus) computes only its open ones. Throws
  // std::invalid_argument for columns that are not the model's.
  void set_languages(ModelLanguages languages);
  const ModelLanguages& languages() const { return *languages_; }
  // The model's open output columns (sorted ids) when some are closed; empty: every column open.
  // A translator without a model of its own (an ensemble) is given them before set_languages.
  const std::vector<int64_t>& open_output_columns() const { return open_columns_; }
  void set_open_output_columns(std::vector<int64_t> columns) { open_columns_ = std::move(columns); }

  // The native model, or a null Transformer for a model of another format.
  Transformer& model() { return model_; }
  const ModelConfig& config() const { return config_; }
  const Tokenizer& src_tokenizer() const { return src_tok_; }
  const Tokenizer& tgt_tokenizer() const { return tgt_tok_; }
  c10::Device device() const { return device_; }
  c10::ScalarType dtype() const { return dtype_; }
  // The precision of the next translate() calls (decoding/translation_dtype.h measures both).
  // `reason`: why (what `--dtype auto` measured), for the commands to report.
  void set_dtype(c10::ScalarType dtype, std::string reason = {}) {
    dtype_ = dtype;
    dtype_reason_ = std::move(reason);
  }
  const std::string& dtype_reason() const { return dtype_reason_; }
  // What the commands report: "int8" when the model's Linear layers run int8
  // (prepare_linears_for_inference; the rest then runs in dtype()), else dtype()'s name.
  std::string precision_name() const;
  // For a translator over other translators (an ensemble): what precision_name() reports.
  void set_precision_name(std::string name) { precision_name_ = std::move(name); }

 private:
  // Lines sorted longest source first (`order`, sorted here) and cut into batches of
  // options.batch_size lines or batch_source_tokens: [begin, end) ranges of `order`, longest
  // first. With `ways` (a group per line), no batch holds lines of two groups.
  static std::vector<std::pair<size_t, size_t>> make_batches(const std::vector<std::vector<int64_t>>& sources,
                                                             std::vector<size_t>& order,
                                                             const TranslationOptions& options,
                                                             const std::vector<int>& ways = {});
  // run_batch(decoder, b) for every b < batches, on the plan's workers (each its own decoder),
  // under the translator's runtime, dtype and inference mode; the first error is rethrown.
  void run_batches(const TranslationOptions& options, size_t batches,
                   const std::function<void(IncrementalDecoder&, size_t)>& run_batch);

  Transformer model_{nullptr};
  DecoderFactory make_decoder_;
  ModelConfig config_;
  Tokenizer src_tok_, tgt_tok_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::string dtype_reason_;
  std::string precision_name_;  // set_precision_name's; empty: from the model and dtype
  int64_t cpu_threads_;  // at::get_num_threads() when made: the cores this translator may use
  std::optional<Runtime> runtime_;
  std::shared_ptr<WorkerPool> pool_;  // the workers' threads, kept between calls (and copies)
  std::shared_ptr<const Shortlist> shortlist_;
  std::shared_ptr<const ModelLanguages> languages_ = std::make_shared<const ModelLanguages>();  // shared by copies
  // From languages_, else the open columns (open_columns_only); null: no restriction.
  std::shared_ptr<const OutputLanguages> output_languages_;
  std::vector<int64_t> open_columns_;
  std::shared_ptr<const OutputLanguages> open_columns_only();  // reads a model's columns afresh
};

}  // namespace torchmt
