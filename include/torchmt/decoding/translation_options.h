#pragma once
// How to translate: search settings, batching, and what `translate`, `evaluate -m` (and a
// server) are told on top: the model file, where it runs, in which precision. One option
// table gives the flags, the help, and the YAML/JSON of all of them. Light header: no
// LibTorch, so option handling compiles fast.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "torchmt/kernels/runtime.h"
#include "torchmt/util/option_table.h"

namespace torchmt {

// The widest beam: millions of hypotheses would only exhaust memory (the kernel kills the
// process without a word).
constexpr int64_t kMaxBeamSize = 1024;

// Whether a search should stop now; default-made: never. (A shared function rather than a
// std::function member: options are copied into std::optional, where GCC 12 warns of the latter.)
class StopCheck {
 public:
  StopCheck() = default;
  explicit StopCheck(std::function<bool()> asked)
      : asked_(std::make_shared<const std::function<bool()>>(std::move(asked))) {}
  bool operator()() const { return asked_ && (*asked_)(); }

 private:
  std::shared_ptr<const std::function<bool()>> asked_;
};

struct SearchOptions {
  int64_t beam_size = 1;          // 1 = greedy
  double length_penalty = 0.6;    // GNMT alpha: score / ((5 + len) / 6)^alpha; 0 = raw log-prob
  // Output length (fairseq's names): at most a * source length + b tokens ...
  double max_len_a = 1.2;
  int64_t max_len_b = 10;
  int64_t max_len_cap = 1024;     // ... and never more than this (the model's max_positions)
  int64_t nbest = 1;              // hypotheses returned per sentence (<= beam_size)
  // Beam search ends a sentence when its best candidate is eos (and nbest are finished), as
  // OpenNMT-py does, rather than when it holds beam_size finished hypotheses (fairseq's
  // criterion and CTranslate2's with patience 1; the default): fewer steps, a search that
  // stops at its first answer.
  bool early_exit = false;
  // Beam search goes on until round(beam_size * patience) hypotheses are finished (at least
  // nbest; Kasai et al.'s patience factor, CTranslate2's `patience`): above 1 it searches longer.
  double patience = 1.0;
  // Hypotheses carry their log-probability and score. Without (false), greedy search only picks
  // tokens, which lets the decoder skip most of the output projection's fp32 work
  // (IncrementalDecoder::greedy_tokens): the same tokens, score and log_prob NaN. Beam search
  // ranks by score and always computes it.
  bool scores = true;
  // Random sampling instead of the argmax (greedy search only; CTranslate2's names): from the
  // sampling_topk most probable tokens (1 = the argmax: no sampling; 0 = the whole vocabulary),
  // cut to the smallest set holding sampling_topp of their probability, after dividing the
  // log-probabilities by sampling_temperature. Each sentence draws from its own random stream,
  // keyed by the seed and its line's number, so batching and workers do not change the samples.
  int64_t sampling_topk = 1;
  double sampling_topp = 1.0;
  double sampling_temperature = 1.0;
  int64_t seed = 1;  // >= 0
  bool sampling() const { return sampling_topk != 1; }
  // Rules on the next token, as fairseq and CTranslate2 offer them; they hold for every search
  // (greedy, beam, sampling) except inside a target prefix and at the length limit, which
  // wins over min_length. Masked tokens are never chosen; the others keep the model's
  // log-probabilities (so `score` gives a rule-abiding hypothesis the same score) except that
  // repetition_penalty's are multiplied, and those products are the hypothesis's scores.
  int64_t min_length = 0;            // tokens before eos, a prefix's included (CTranslate2's min_decoding_length)
  bool disable_unk = false;          // never the unknown piece
  int64_t no_repeat_ngram_size = 0;  // no n-gram of this many tokens twice in one output (0 = off)
  double repetition_penalty = 1.0;   // a token already in the output: log-probability x this (> 1 discourages)
  bool token_rules() const {
    return min_length > 0 || disable_unk || no_repeat_ngram_size > 0 || repetition_penalty != 1.0;
  }
  int64_t bos_id = 2;
  int64_t eos_id = 3;
  int64_t pad_id = 0;
  int64_t unk_id = 1;
  // Asked before every step (from the searching thread): true ends the search with
  // SearchStopped. Ctrl-C in Python and a server request whose caller has gone stop a batch at
  // its next step instead of its end.
  StopCheck stop;
};

// A search that SearchOptions::stop ended; its batch has no result.
struct SearchStopped : std::runtime_error {
  SearchStopped() : std::runtime_error("the search was stopped") {}
};

struct TranslationOptions {
  SearchOptions search;
  int64_t batch_size = 64;           // sentences per batch (used when batch_source_tokens == 0)
  int64_t batch_source_tokens = 0;   // rows * longest source (padding included) per batch; 0 = use batch_size
  bool use_cache = true;             // false: recompute the prefix at every step (reference/benchmark)
  int64_t workers = 0;               // batches decoded in parallel; 0 = chosen per job (Translator::plan_workers)
  int64_t threads_per_worker = 0;    // threads inside each worker's operations; 0 = threads / workers
  // The number of the first line given to Translator::translate in the whole input: sampling's
  // random stream of a line is its number's, so input translated in windows samples as a whole.
  int64_t first_line = 0;
};

// A translator as a user configures it.
struct TranslatorConfig {
  // Checkpoints (.pt) or TorchScript exports (.ts); several: an ensemble (decoding/ensemble_decoder.h).
  std::vector<std::string> models;
  std::string ensemble_weights;  // "0.5,0.5": one positive weight per model; empty: equal
  std::string device = "auto";
  std::string dtype = "auto";
  int64_t threads = 0;  // 0 = all cores
  bool greedy = false;  // explicit greedy search (conflicts with beam > 1)
  TranslationOptions translation;
  std::string shortlist;  // `torchmt shortlist` table: restricts the output vocabulary per sentence
  // The kernels' settings for this translator (kernels/runtime.h); unset: the process's (the
  // environment table's). The CLI sets Runtime::from_environment().
  std::optional<Runtime> runtime;
  // Throws std::invalid_argument naming the flag.
  void validate() const;
};

const OptionTable<TranslatorConfig>& translator_option_table();

// Why the search's sampling settings cannot be used, "" when they can. `flags`: name them as
// `translate`'s flags (--sampling-topp), else as request fields (sampling_topp).
std::string sampling_problem(const SearchOptions& search, bool flags);

// Whether two searches choose alike: every setting but the stop check and the special ids.
bool same_choices(const SearchOptions& a, const SearchOptions& b);

// Why the search's beam, n-best, length penalty, length limits, patience and token rules cannot
// be used, "" when they can. `flags`: named as `translate`'s flags (--beam, --lenpen), else as the
// Python API's keywords (beam_size, length_penalty).
std::string search_problem(const SearchOptions& search, bool flags);

// Why the patience or the token rules cannot be used, "" when they can. `flags`: named as
// `translate`'s flags (--no-repeat-ngram-size), else as fields and keywords (no_repeat_ngram_size);
// min_length's name is the caller's (--min-len, min_len, min_decoding_length).
std::string search_rules_problem(const SearchOptions& search, bool flags, const std::string& min_length_name);

}  // namespace torchmt
