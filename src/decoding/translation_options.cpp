#include "torchmt/decoding/translation_options.h"

#include "torchmt/util/device.h"
#include "util/thread_team.h"

#include <cmath>
#include <stdexcept>

#include "decoding/ensemble_decoder.h"

namespace torchmt {

const OptionTable<TranslatorConfig>& translator_option_table() {
  using C = TranslatorConfig;
  const OptionExtra decoding{"", "decoding", {}};
  const OptionExtra runtime{"", "runtime", {}};
  static const auto table = OptionTable<C>("translation")
      .add("model", &C::models,
           "checkpoint (.pt) or TorchScript export (.ts); given more than once: an ensemble, the models' "
           "log-probabilities averaged at every step (they must share the vocabulary)",
           {"m", "decoding", {}})
      .add("ensemble_weights", &C::ensemble_weights,
           "an ensemble's weights, one per model, comma-separated (e.g. 0.6,0.4; default: equal)", decoding)
      .add("beam", [](C& c) -> int64_t& { return c.translation.search.beam_size; }, "beam size (1 = greedy)",
           decoding)
      .add("greedy", &C::greedy, "greedy search (the default; same as --beam 1)", decoding)
      .add("lenpen", [](C& c) -> double& { return c.translation.search.length_penalty; },
           "GNMT length penalty alpha (0 = raw log-probability)", decoding)
      .add("max_len_a", [](C& c) -> double& { return c.translation.search.max_len_a; },
           "output length limit: a * source tokens + b", decoding)
      .add("max_len_b", [](C& c) -> int64_t& { return c.translation.search.max_len_b; }, "see --max-len-a",
           decoding)
      .add("nbest", [](C& c) -> int64_t& { return c.translation.search.nbest; },
           "hypotheses per input line (at most --beam)", decoding)
      .add("early_exit", [](C& c) -> bool& { return c.translation.search.early_exit; },
           "beam search ends a sentence as soon as its best candidate ends it (OpenNMT-py's criterion; faster, "
           "BLEU may drop a little), not once it has --beam finished hypotheses (fairseq's and CTranslate2's, "
           "the default)", decoding)
      .add("patience", [](C& c) -> double& { return c.translation.search.patience; },
           "beam search runs until round(beam x patience) hypotheses are finished (1 = beam; > 1 searches "
           "longer)", decoding)
      .add("sampling_topk", [](C& c) -> int64_t& { return c.translation.search.sampling_topk; },
           "sample the next token from the K most probable (1 = no sampling, the argmax; 0 = the whole "
           "vocabulary); greedy search only", decoding)
      .add("sampling_topp", [](C& c) -> double& { return c.translation.search.sampling_topp; },
           "sample from the smallest set of those tokens holding this much probability (0 < P <= 1)", decoding)
      .add("sampling_temperature", [](C& c) -> double& { return c.translation.search.sampling_temperature; },
           "divide the log-probabilities by T before sampling (T > 0; < 1 sharper, > 1 flatter)", decoding)
      .add("seed", [](C& c) -> int64_t& { return c.translation.search.seed; },
           "sampling's seed: the same seed gives the same samples, whatever the batching and workers", decoding)
      .add("min_len", [](C& c) -> int64_t& { return c.translation.search.min_length; },
           "no end of sentence before this many output pieces (a target prefix's included; 0 = off)", decoding)
      .add("disable_unk", [](C& c) -> bool& { return c.translation.search.disable_unk; },
           "never output the unknown piece", decoding)
      .add("no_repeat_ngram_size", [](C& c) -> int64_t& { return c.translation.search.no_repeat_ngram_size; },
           "no sequence of this many pieces twice in one output (0 = off)", decoding)
      .add("repetition_penalty", [](C& c) -> double& { return c.translation.search.repetition_penalty; },
           "multiply the log-probability of a piece already in the output by this (1 = off; > 1 discourages "
           "repeating; scores then include it)", decoding)
      .add("shortlist", &C::shortlist,
           "output vocabulary shortlist from `torchmt shortlist`: each sentence may only produce its source "
           "pieces' candidates and the table's frequent pieces (faster on the CPU)", decoding)
      .add("batch_size", [](C& c) -> int64_t& { return c.translation.batch_size; },
           "sentences per batch (when --batch-source-tokens is 0)", decoding)
      .add("batch_source_tokens", [](C& c) -> int64_t& { return c.translation.batch_source_tokens; },
           "source tokens per batch, rows x longest source incl. padding (0 = use --batch-size)",
           {"", "decoding", {"max_tokens"}})
      .add_custom(
         "no_cache", OptionKind::kBool, "recompute the whole prefix at every step (slow; for comparison)",
         [](C& c, const std::string& v) { c.translation.use_cache = v != "true"; },
         [](const C& c) { return c.translation.use_cache ? std::string("false") : std::string("true"); }, decoding)
      .add("device", &C::device, "auto|cpu|cuda|cuda:N", runtime)
      .add("dtype", &C::dtype, "auto|fp32|bf16|fp16|int8 (auto: on a GPU or a CPU with native bf16, whichever of fp32 and bf16 translates "
           "faster here, measured once per machine and model and cached; an int8 export: int8; int8: CPU, "
           "Linear weights and activations quantized per row)", runtime)
      .add("threads", &C::threads, "CPU threads, 0 = all cores", runtime)
      .add("workers", [](C& c) -> int64_t& { return c.translation.workers; },
           "batches translated in parallel (CTranslate2's inter_threads); 0 = one per core, at most one per batch",
           runtime)
      .add("threads_per_worker", [](C& c) -> int64_t& { return c.translation.threads_per_worker; },
           "threads inside each worker (intra_threads); 0 = --threads / --workers", runtime);
  return table;
}

void TranslatorConfig::validate() const {
  if (runtime) runtime->validate();
  const SearchOptions& s = translation.search;
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
  };
  require(!models.empty(), "missing required option -m/--model");
  for (const auto& m : models) require(!m.empty(), "-m/--model: an empty path");
  if (!ensemble_weights.empty()) (void)parse_ensemble_weights(ensemble_weights, models.size());
  require(is_dtype_spelling(dtype) || dtype == "int8",  // (int8: the translator's own precision)
          "--dtype must be auto, fp32, bf16, fp16 or int8, got '" + dtype + "'");
  require(!(greedy && s.beam_size != 1), "--greedy and --beam N conflict");
  const std::string search = search_problem(s, true);
  require(search.empty(), search);
  require(translation.batch_size >= 1, "--batch-size must be at least 1");
  require(translation.batch_source_tokens >= 0, "--batch-source-tokens must not be negative");
  const std::string most = std::to_string(kMaxThreads);
  require(threads >= 0 && threads <= kMaxThreads, "--threads must be in [0, " + most + "]");
  require(translation.workers >= 0 && translation.workers <= kMaxThreads, "--workers must be in [0, " + most + "]");
  require(translation.threads_per_worker >= 0 && translation.threads_per_worker <= kMaxThreads,
          "--threads-per-worker must be in [0, " + most + "]");
  const std::string sampling = sampling_problem(s, true);
  require(sampling.empty(), sampling);
}

std::string search_problem(const SearchOptions& s, bool flags) {
  const char* beam = flags ? "--beam" : "beam_size";
  const std::string len_a = flags ? "--max-len-a" : "max_len_a", len_b = flags ? "--max-len-b" : "max_len_b";
  if (s.beam_size < 1 || s.beam_size > kMaxBeamSize)
    return std::string(beam) + " must be between 1 and " + std::to_string(kMaxBeamSize);
  if (s.nbest < 1 || s.nbest > s.beam_size)
    return std::string(flags ? "--nbest" : "num_hypotheses") + " must be between 1 and " + beam;
  if (!(s.max_len_a >= 0 && s.max_len_a <= 1e6 && s.max_len_b >= 0))
    return len_a + " must be in [0, 1e6], " + len_b + " >= 0";
  // Beyond ~100, ((5 + len) / 6)^alpha overflows and every score becomes 0.
  if (!(s.length_penalty >= 0 && s.length_penalty <= 10))
    return std::string(flags ? "--lenpen" : "length_penalty") + " must be in [0, 10]";
  return search_rules_problem(s, flags, flags ? "--min-len" : "min_decoding_length");
}

std::string search_rules_problem(const SearchOptions& s, bool flags, const std::string& min_length_name) {
  if (!(s.patience > 0 && s.patience <= 100) || std::lround(static_cast<double>(s.beam_size) * s.patience) < 1)
    return std::string(flags ? "--patience" : "patience") + " must be in (0, 100], beam x patience at least 0.5";
  const std::string ngram = flags ? "--no-repeat-ngram-size" : "no_repeat_ngram_size";
  const std::string penalty = flags ? "--repetition-penalty" : "repetition_penalty";
  if (s.min_length < 0 || s.min_length > 1024) return min_length_name + " must be in [0, 1024]";
  if (s.no_repeat_ngram_size < 0 || s.no_repeat_ngram_size > 1024) return ngram + " must be in [0, 1024] (0 = off)";
  // Below 1 it rewards repeating; beyond 1e3 every repeated token is as good as banned.
  if (!(s.repetition_penalty > 0 && s.repetition_penalty <= 1e3))
    return penalty + " must be a number in (0, 1000] (1 = off, > 1 discourages repeating)";
  return {};
}

bool same_choices(const SearchOptions& x, const SearchOptions& y) {
  return x.beam_size == y.beam_size && x.length_penalty == y.length_penalty && x.max_len_a == y.max_len_a &&
         x.max_len_b == y.max_len_b && x.max_len_cap == y.max_len_cap && x.nbest == y.nbest &&
         x.early_exit == y.early_exit && x.patience == y.patience && x.scores == y.scores &&
         x.sampling_topk == y.sampling_topk && x.sampling_topp == y.sampling_topp &&
         x.sampling_temperature == y.sampling_temperature && x.seed == y.seed && x.min_length == y.min_length &&
         x.disable_unk == y.disable_unk && x.no_repeat_ngram_size == y.no_repeat_ngram_size &&
         x.repetition_penalty == y.repetition_penalty;
}

std::string sampling_problem(const SearchOptions& s, bool flags) {
  auto name = [flags](std::string n) {
    if (!flags) return n;
    for (auto& c : n)
      if (c == '_') c = '-';
    return "--" + n;
  };
  if (s.seed < 0) return name("seed") + " must not be negative";
  if (s.sampling_topk < 0) return name("sampling_topk") + " must not be negative (0 = the whole vocabulary)";
  if (!(s.sampling_topp > 0.0 && s.sampling_topp <= 1.0)) return name("sampling_topp") + " must be in (0, 1]";
  if (!(s.sampling_temperature > 0.0 && s.sampling_temperature <= 1e6))
    return name("sampling_temperature") + " must be a positive number, at most 1e6";
  if (!s.sampling() && (s.sampling_topp != 1.0 || s.sampling_temperature != 1.0))
    return name("sampling_topp") + " and " + name("sampling_temperature") + " need " + name("sampling_topk") +
           " other than 1 (0 = the whole vocabulary)";
  if (s.sampling() && s.beam_size != 1)
    return name("sampling_topk") + " samples instead of searching: it needs " + name("beam") + " 1";
  return {};
}

}  // namespace torchmt
