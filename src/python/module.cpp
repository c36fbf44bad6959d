// torchmt._native: the Python package's bindings (pybind11) over the library's facades:
// Translator (decoding/), corpus BLEU and chrF (evaluation/), Trainer (training/). Raw values
// cross here; the classes users see, their docstrings and argument checks are Python
// (src/python/torchmt/__init__.py). Every long call runs with the GIL released on a thread of
// its own while the calling thread polls for Ctrl-C, so other Python threads run meanwhile and
// KeyboardInterrupt stops the call where it can stop cleanly.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include "kernels/cpu_isa.h"
#include "decoding/greedy_stream.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/decoding/word_aligner.h"
#include "torchmt/evaluation/bleu.h"
#include "torchmt/evaluation/chrf.h"
#include "torchmt/evaluation/corpus_filter.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/training/corpus_cleaning.h"
#include "torchmt/training/distillation.h"
#include "torchmt/training/train_options.h"
#include "torchmt/training/train_recipes.h"
#include "torchmt/training/trainer.h"
#include "torchmt/util/flat_config.h"
#include "torchmt/util/device.h"
#include "util/heap.h"
#include "torchmt/util/strings.h"
#include "util/thread_team.h"

namespace py = pybind11;

namespace torchmt::python {
namespace {

// A call's Ctrl-C: run_interruptible's on_interrupt raises it, the search asks it before every
// step (SearchOptions::stop), so a long batch stops at its next step.
struct StopFlag {
  std::shared_ptr<std::atomic<bool>> raised = std::make_shared<std::atomic<bool>>(false);
  StopCheck asked() const {
    return StopCheck([r = raised] { return r->load(); });
  }
  std::function<void()> raise() const {
    return [r = raised] { r->store(true); };
  }
};

// Runs work() on a thread of its own with the GIL released; the calling thread checks Python's
// signals every 50 ms. On Ctrl-C (a pending KeyboardInterrupt) it calls on_interrupt(), waits
// for work() to end and raises the KeyboardInterrupt; otherwise it returns work()'s result or
// rethrows its exception.
template <class Result>
Result run_interruptible(std::function<Result()> work, const std::function<void()>& on_interrupt) {
  std::packaged_task<Result()> task(std::move(work));
  auto result = task.get_future();
  std::thread runner;
  {
    py::gil_scoped_release release;
    runner = std::thread(std::move(task));
    while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) {
        py::error_already_set interrupt;  // takes the pending KeyboardInterrupt
        on_interrupt();
        {
          py::gil_scoped_release wait;
          result.wait();
          runner.join();
        }
        throw interrupt;
      }
    }
    runner.join();
  }
  return result.get();
}

// One hypothesis as Python receives it: text, pieces, score, log-probability.
using PyHypothesis = std::tuple<std::string, std::vector<std::string>, double, double>;
// One line: its hypotheses, each hypothesis's word alignment (when asked), truncated, each
// hypothesis's attention vectors (when asked: [target pieces][source pieces + eos]).
using PyAttention = std::vector<std::vector<float>>;
using PyTranslation = std::tuple<std::vector<PyHypothesis>, std::vector<WordAlignment>, bool, std::vector<PyAttention>>;

// Hands per-hypothesis results, in the order the hypotheses were collected, to field `Field` of
// each line; a blank line's placeholder hypothesis (not aligned: no words) gets an empty one.
template <size_t Field, class T>
void spread(std::vector<PyTranslation>& out, const std::vector<Translation>& translations, std::vector<T> results) {
  size_t next = 0;
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t h = 0; h < std::get<0>(out[i]).size(); ++h)
      std::get<Field>(out[i]).push_back(translations[i].hypotheses.empty() ? T{} : std::move(results[next++]));
}

class NativeTranslator {
 public:
  // `runtime`: the kernels' settings that differ from the environment table's (checked for
  // names and types by Python; values by Runtime::validate, a ValueError).
  NativeTranslator(const std::vector<std::string>& models, const std::string& ensemble_weights,
                   const std::string& device, const std::string& dtype,
                   int64_t inter_threads, int64_t intra_threads, const std::string& shortlist,
                   const py::dict& runtime) {
    TranslatorConfig config;
    config.models = models;
    config.ensemble_weights = ensemble_weights;
    config.device = device;
    config.dtype = dtype;
    config.shortlist = shortlist;
    {
      Runtime rt = Runtime::from_environment();
      rt.inter_threads = inter_threads;
      rt.intra_threads = intra_threads;
      if (runtime.contains("cpu_isa")) rt.cpu_isa = runtime["cpu_isa"].cast<std::string>();
      if (runtime.contains("packed_gemm")) rt.packed_gemm = runtime["packed_gemm"].cast<std::string>();
      if (runtime.contains("screened_argmax")) rt.screened_argmax = runtime["screened_argmax"].cast<bool>();
      if (runtime.contains("screened_beam")) rt.screened_beam = runtime["screened_beam"].cast<bool>();
      if (runtime.contains("sparse_input")) rt.sparse_input = runtime["sparse_input"].cast<bool>();
      rt.validate();
      config.runtime = rt;
    }
    translator_ = std::make_unique<Translator>(run_interruptible<Translator>(
        [config] { return load_translator(config); }, [] {}));
  }

  std::vector<PyTranslation> translate(const std::vector<std::string>& lines, const py::dict& settings,
                                       const std::vector<std::string>& prefixes,
                                       const std::vector<std::vector<std::string>>& constraints, bool alignments,
                                       bool attention, bool pieces, double reverse_weight, NativeTranslator* reverse) {
    TranslationOptions options = translation_options(settings);
    // The reverse direction for reverse_weight (checked by Python): another translator, or this
    // one where it knows both directions.
    Translator* back = reverse != nullptr ? reverse->translator_.get() : translator_.get();
    const std::string problem =
        reverse_weight != 0 ? reverse_problem(*translator_, reverse ? reverse->translator_.get() : nullptr) : "";
    if (!problem.empty())
      throw std::invalid_argument(reverse ? "reverse_translator " + problem
                                          : "reverse_weight: " + problem + ": give reverse_translator");
    std::vector<LineSteering> steering;
    if (!prefixes.empty() || !constraints.empty()) {
      steering.resize(lines.size());
      for (size_t i = 0; i < lines.size(); ++i) {
        if (!prefixes.empty()) steering[i].target_prefix = prefixes[i];
        if (!constraints.empty()) steering[i].constraints = constraints[i];
      }
    }
    const StopFlag stop;
    options.search.stop = stop.asked();
    Translator& translator = *translator_;
    return run_interruptible<std::vector<PyTranslation>>(
        [&translator, back, reverse_weight, &lines, options, steering, alignments, attention, pieces, stop] {
          auto translations = translate_rescored(translator, *back, reverse_weight, lines, options, {}, steering);
          std::vector<PyTranslation> out;
          out.reserve(translations.size());
          std::vector<std::string> sources;
          std::vector<std::vector<int64_t>> targets;
          for (size_t i = 0; i < translations.size(); ++i) {
            const Translation& t = translations[i];
            std::vector<PyHypothesis> hyps;
            // A blank line: one empty hypothesis (log-probability 0), as CTranslate2 answers.
            if (t.hypotheses.empty()) hyps.emplace_back("", std::vector<std::string>{}, 0.0, 0.0);
            for (size_t h = 0; h < t.hypotheses.size(); ++h) {
              std::vector<std::string> target_pieces;  // only for token input: text input gets text
              if (pieces)
                for (int64_t id : t.hypotheses[h].tokens) target_pieces.push_back(translator.tgt_tokenizer().id_to_piece(id));
              hyps.emplace_back(t.texts[h], std::move(target_pieces), t.hypotheses[h].score, t.hypotheses[h].log_prob);
              if (alignments || attention) {
                sources.push_back(lines[i]);
                targets.push_back(t.hypotheses[h].tokens);
              }
            }
            out.emplace_back(std::move(hyps), std::vector<WordAlignment>{}, t.truncated, std::vector<PyAttention>{});
          }
          if (attention && !sources.empty()) {
            if (stop.raised->load()) throw SearchStopped();
            spread<3>(out, translations, attention_vectors(translator, sources, targets));
          }
          if (alignments && !sources.empty()) {
            if (stop.raised->load()) throw SearchStopped();
            spread<1>(out, translations, align_words(translator, sources, targets));
          }
          return out;
        },
        stop.raise());
  }

  // Forced decoding of (source, target) texts: per pair its pieces (then "</s>"), their
  // log-probabilities, the sum, the length-normalised score and whether it was cut.
  using PyScore = std::tuple<std::vector<std::string>, std::vector<float>, double, double, bool>;
  std::vector<PyScore> score(const std::vector<std::string>& sources, const std::vector<std::string>& targets,
                             const py::dict& settings) {
    TranslationOptions options = translation_options(settings);  // (its length penalty and batches)
    const StopFlag stop;
    options.search.stop = stop.asked();
    Translator& translator = *translator_;
    return run_interruptible<std::vector<PyScore>>(
        [&translator, &sources, &targets, options] {
          auto scores = translator.score(sources, targets, options);
          std::vector<PyScore> out;
          out.reserve(scores.size());
          for (auto& s : scores) {
            std::vector<std::string> pieces;
            for (int64_t id : s.tokens) pieces.push_back(translator.tgt_tokenizer().id_to_piece(id));
            pieces.emplace_back("</s>");
            out.emplace_back(std::move(pieces), std::move(s.log_probs), s.log_prob, s.score, s.truncated);
          }
          return out;
        },
        stop.raise());
  }

  // Pieces of the source vocabulary back to text (token input, CTranslate2's form).
  std::string detokenize_source(const std::vector<std::string>& pieces) const { return detokenize(translator_->src_tokenizer(), pieces); }
  std::string detokenize_target(const std::vector<std::string>& pieces) const { return detokenize(translator_->tgt_tokenizer(), pieces); }
  std::vector<std::string> tokenize_source(const std::string& text) const { return translator_->src_tokenizer().encode_pieces(text); }

  Translator& translator() { return *translator_; }
  std::string device() const { return translator_->device().str(); }
  std::string precision() const { return translator_->precision_name(); }
  int64_t max_positions() const { return translator_->config().max_positions; }

 private:
  static std::string detokenize(const Tokenizer& tokenizer, const std::vector<std::string>& pieces) {
    std::vector<int64_t> ids;
    ids.reserve(pieces.size());
    for (const auto& p : pieces) {
      ids.push_back(tokenizer.piece_to_id(p));
      // An unknown piece would decode to U+2047 and be read back as other pieces: say so instead.
      if (ids.back() == tokenizer.special_ids().unk && p != tokenizer.id_to_piece(ids.back()))
        throw std::invalid_argument("token '" + p + "' is not a piece of the model's vocabulary");
    }
    return tokenizer.decode(ids);
  }

  // The search settings from translate_batch's keywords (already checked for type by Python;
  // ranges are checked here, where the rules live).
 public:
  static TranslationOptions translation_options(const py::dict& s) {
    TranslationOptions o;
    SearchOptions& search = o.search;
    search.beam_size = s["beam_size"].cast<int64_t>();
    search.nbest = s["num_hypotheses"].cast<int64_t>();
    search.length_penalty = s["length_penalty"].cast<double>();
    search.max_len_a = s["max_len_a"].cast<double>();
    search.max_len_b = s["max_len_b"].cast<int64_t>();
    search.max_len_cap = s["max_decoding_length"].cast<int64_t>();
    search.early_exit = s["early_exit"].cast<bool>();
    search.scores = s["return_scores"].cast<bool>() || search.beam_size > 1;
    search.sampling_topk = s["sampling_topk"].cast<int64_t>();
    search.sampling_topp = s["sampling_topp"].cast<double>();
    search.sampling_temperature = s["sampling_temperature"].cast<double>();
    search.seed = s["seed"].cast<int64_t>();
    search.patience = s["patience"].cast<double>();
    search.min_length = s["min_decoding_length"].cast<int64_t>();
    search.disable_unk = s["disable_unk"].cast<bool>();
    search.no_repeat_ngram_size = s["no_repeat_ngram_size"].cast<int64_t>();
    search.repetition_penalty = s["repetition_penalty"].cast<double>();
    o.batch_size = s["max_batch_size"].cast<int64_t>();
    o.batch_source_tokens = s["batch_source_tokens"].cast<int64_t>();
    o.first_line = s["first_line"].cast<int64_t>();
    auto require = [](bool ok, const std::string& message) {
      if (!ok) throw std::invalid_argument(message);
    };
    const std::string problem = search_problem(search, false);
    require(problem.empty(), problem);
    require(search.max_len_cap >= 1, "max_decoding_length must be at least 1");
    require(o.batch_size >= 1, "max_batch_size must be at least 1");
    const std::string sampling = sampling_problem(search, false);
    require(sampling.empty(), sampling);
    return o;
  }

 private:
  std::unique_ptr<Translator> translator_;
};

// generate_tokens: one sentence's greedy (or sampled) search, a step per next(), each step's
// token as it comes. One token ahead, so that the last one says it is the last.
class NativeTokenStream {
 public:
  using Step = std::tuple<int64_t, std::string, double, bool>;  // token id, piece, log-prob, last

  NativeTokenStream(NativeTranslator& owner, const std::string& source, const py::dict& settings)
      : translator_(owner.translator()),
        options_(NativeTranslator::translation_options(settings)),
        team_(static_cast<int>(translator_.plan_workers(options_, 1).threads_per_worker)) {
    if (options_.search.beam_size != 1) throw std::invalid_argument("generate_tokens runs greedy search (beam_size 1)");
    options_.search.scores = true;
    const auto ids = translator_.encode_source(source);
    run([&] {
      decoder_ = translator_.make_decoder(true);
      stream_ = std::make_unique<GreedyStream>(*decoder_);
      const SearchOptions search = translator_.search_options(options_);
      Steering steering;
      if (search.sampling() || translator_.restricts_output())
        steering.push_back(translator_.steer(ids, LineSteering{}, options_.first_line));
      stream_->join(translator_.source_batch({&ids}), {0}, search, steering);
      ahead_ = advance();
    });
  }

  std::optional<Step> next() {
    if (!ahead_) return std::nullopt;
    Step current = *ahead_;
    run([&] { ahead_ = advance(); });
    std::get<3>(current) = !ahead_.has_value();
    return current;
  }

 private:
  // One decoder step with the GIL released, on this thread's own team and precision.
  template <class F>
  void run(F&& work) {
    py::gil_scoped_release release;
    ScopedThreadTeam team(team_);
    c10::InferenceMode inference;
    AutocastGuard autocast(translator_.device(), translator_.dtype());
    work();
  }

  std::optional<Step> advance() {
    if (stream_->empty()) return std::nullopt;
    stream_->step();
    if (stream_->empty()) return std::nullopt;  // it ended (eos or the length limit)
    const Hypothesis& h = stream_->running(0);
    const int64_t token = h.tokens.back();
    const double log_prob = h.log_prob - summed_;
    summed_ = h.log_prob;
    return Step{token, translator_.tgt_tokenizer().id_to_piece(token), log_prob, false};
  }

  Translator& translator_;
  TranslationOptions options_;
  int team_;
  std::unique_ptr<IncrementalDecoder> decoder_;
  std::unique_ptr<GreedyStream> stream_;
  std::optional<Step> ahead_;
  double summed_ = 0;
};

// The options of a command by their config names (Python's keyword arguments, as text and lists).
FlatConfig flat_config(const std::map<std::string, std::string>& values,
                       const std::map<std::string, std::vector<std::string>>& lists) {
  FlatConfig config;
  for (const auto& [key, value] : values) config.set(key, value);
  for (const auto& [key, list] : lists) config.set_list(key, list);
  return config;
}

// A training command's options: flat_config with its recipe's defaults under them.
FlatConfig options_config(const std::map<std::string, std::string>& values,
                          const std::map<std::string, std::vector<std::string>>& lists) {
  return with_recipe(flat_config(values, lists));
}

// Runs a training job (`run` with its hooks) off the GIL: each progress line goes to `on_progress`
// (under the GIL); Ctrl-C, or an exception of the callback, stops the job as SIGINT does (with a
// checkpoint), then is raised.
template <class Summary>
Summary run_with_progress(const py::object& on_progress, std::function<Summary(const TrainHooks&)> run) {
  auto callback_error = std::make_shared<std::exception_ptr>();
  TrainHooks hooks;
  if (!on_progress.is_none()) {
    hooks.on_progress = [on_progress, callback_error](int64_t step, const std::string& line) {
      py::gil_scoped_acquire acquire;
      if (*callback_error) return;
      try {
        on_progress(step, line);
      } catch (...) {
        *callback_error = std::current_exception();
        request_training_stop();
      }
    };
  }
  Summary s = run_interruptible<Summary>([run, hooks] { return run(hooks); }, [] { request_training_stop(); });
  if (*callback_error) std::rethrow_exception(*callback_error);
  return s;
}

py::dict train_summary(const TrainSummary& s) {
  py::dict out;
  out["steps"] = s.steps;
  out["epochs_completed"] = s.epochs_completed;
  out["best_bleu"] = s.best_bleu;
  out["last_bleu"] = s.last_bleu;
  out["last_valid_loss"] = s.last_valid_loss;
  out["last_train_loss"] = s.last_train_loss;
  out["train_seconds"] = s.train_seconds;
  out["tokens_per_sec"] = s.tokens_per_sec;
  out["interrupted"] = s.interrupted;
  out["best_checkpoint"] = s.best_checkpoint;
  return out;
}

// train(options, on_progress): the train command's options by their config names.
py::dict train(const std::map<std::string, std::string>& values, const std::map<std::string, std::vector<std::string>>& lists,
               const py::object& on_progress) {
  TrainOptions options = TrainOptions::from_config(options_config(values, lists));
  options.validate();
  return train_summary(
      run_with_progress<TrainSummary>(on_progress, [options](const TrainHooks& h) { return Trainer(options).run(h); }));
}

// distill(options, on_progress): the distill command's options by their config names.
py::dict distill(const std::map<std::string, std::string>& values,
                 const std::map<std::string, std::vector<std::string>>& lists, const py::object& on_progress) {
  DistillOptions options = distill_option_table().read(options_config(values, lists));
  options.validate();
  const DistillSummary s = run_with_progress<DistillSummary>(
      on_progress, [options](const TrainHooks& h) { return torchmt::distill(options, h); });
  py::dict out;
  out["teacher_src"] = s.teacher_src;
  out["teacher_tgt"] = s.teacher_tgt;
  out["teacher_reused"] = s.teacher_reused;
  out["teacher_lines"] = s.teacher_lines;
  out["untranslated_lines"] = s.untranslated_lines;
  out["back_src"] = s.back_src;
  out["back_tgt"] = s.back_tgt;
  out["back_lines"] = s.back_lines;
  out["teacher_seconds"] = s.teacher_seconds;
  out["student"] = train_summary(s.student);
  out["shortlist"] = s.shortlist;
  out["interrupted"] = s.interrupted;
  return out;
}

py::dict filter_report(const CorpusFilterReport& r) {
  py::dict out;
  out["pairs"] = r.pairs;
  out["kept"] = r.kept;
  out["dropped_by_score"] = r.dropped_by_score;
  out["dropped_by_length"] = r.dropped_by_length;
  out["length_bounds"] = r.length_high > 0 ? py::object(py::make_tuple(r.length_low, r.length_high)) : py::none();
  out["unscorable"] = r.unscorable;
  out["truncated"] = r.truncated.count();
  out["threshold"] = r.threshold;
  out["reference_pairs"] = r.reference_pairs;
  out["realigned"] = r.realigned;
  out["realign_threshold"] = r.realign_threshold;
  out["wrong_language"] = r.wrong_language;
  out["summary"] = r.summary();
  return out;
}

// filter_corpus(forward, backward, values, settings): evaluation/corpus_filter.h with the models as
// loaded; `values` the filter command's options by their config names (checked for type by Python),
// `settings` the batching of score_batch. Ctrl-C stops it between batches, nothing written.
py::dict filter_corpus(NativeTranslator& forward, NativeTranslator& backward,
                       const std::map<std::string, std::string>& values, const py::dict& settings) {
  CorpusFilterOptions o = corpus_filter_option_table().read(flat_config(values, {}));
  o.forward_name = "forward";
  o.backward_name = "backward";
  o.validate();
  TranslationOptions search;
  search.batch_size = settings["max_batch_size"].cast<int64_t>();
  search.batch_source_tokens = settings["batch_source_tokens"].cast<int64_t>();
  const StopFlag stop;
  search.search.stop = stop.asked();
  Translator& f = forward.translator();
  Translator& b = backward.translator();
  const CorpusFilterReport r = run_interruptible<CorpusFilterReport>(
      [&f, &b, search, o] { return torchmt::filter_corpus(f, b, search, o); }, stop.raise());
  return filter_report(r);
}

// clean(options, on_progress): the clean command's options by their config names; the report as
// filter_corpus's with the parts' thresholds and the models trained.
py::dict clean(const std::map<std::string, std::string>& values,
               const std::map<std::string, std::vector<std::string>>& lists, const py::object& on_progress) {
  CleanOptions options = clean_option_table().read(options_config(values, lists));
  options.validate();
  const CleanSummary s = run_with_progress<CleanSummary>(
      on_progress, [options](const TrainHooks& h) { return torchmt::clean_corpus(options, h); });
  py::dict out = filter_report(s.report);
  out["thresholds"] = s.thresholds;
  out["trained"] = s.trained;
  out["reused"] = s.reused;
  out["train_seconds"] = s.train_seconds;
  out["interrupted"] = s.interrupted;
  return out;
}

py::dict bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs) {
  evaluation::BleuScore b;
  {
    py::gil_scoped_release release;
    b = evaluation::corpus_bleu(hyps, refs);
  }
  py::dict out;
  out["score"] = b.score;
  out["precisions"] = std::vector<double>(b.precisions.begin(), b.precisions.end());
  out["bp"] = b.bp;
  out["ratio"] = b.ratio;
  out["sys_len"] = b.hyp_len;
  out["ref_len"] = b.ref_len;
  out["text"] = b.format();
  out["signature"] = b.signature();
  return out;
}

py::dict chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs) {
  evaluation::ChrfScore c;
  {
    py::gil_scoped_release release;
    c = evaluation::corpus_chrf(hyps, refs);
  }
  py::dict out;
  out["score"] = c.score;
  out["text"] = c.format();
  out["signature"] = c.signature();
  return out;
}

}  // namespace
}  // namespace torchmt::python

PYBIND11_MODULE(_native, m) {
  using torchmt::python::NativeTranslator;
  m.doc() = "torchmt's compiled core; use the torchmt package, not this module";
  m.attr("version") = TORCHMT_VERSION;
  m.attr("torch_version") = TORCH_VERSION;  // the LibTorch it was built against
  // LibTorch's errors: their first line, without the C++ backtrace.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, torchmt::first_line(e.what_without_backtrace()).c_str());
    }
  });
  py::class_<NativeTranslator>(m, "NativeTranslator")
      .def(py::init<const std::vector<std::string>&, const std::string&, const std::string&, const std::string&,
                    int64_t, int64_t, const std::string&, const py::dict&>())
      .def("translate", &NativeTranslator::translate)
      .def("score", &NativeTranslator::score)
      .def("detokenize_source", &NativeTranslator::detokenize_source)
      .def("detokenize_target", &NativeTranslator::detokenize_target)
      .def("tokenize_source", &NativeTranslator::tokenize_source)
      .def_property_readonly("device", &NativeTranslator::device)
      .def_property_readonly("precision", &NativeTranslator::precision)
      .def_property_readonly("max_positions", &NativeTranslator::max_positions);
  py::class_<torchmt::python::NativeTokenStream>(m, "NativeTokenStream")
      .def(py::init<NativeTranslator&, const std::string&, const py::dict&>(), py::keep_alive<1, 2>())
      .def("next", &torchmt::python::NativeTokenStream::next);
  m.def("limit_library_isas", &torchmt::kernels::limit_library_isas);
  m.def("use_cpu_tensor_pool", [](size_t cache_mb) { torchmt::use_cpu_tensor_pool(cache_mb << 20); },
        py::arg("cache_mb"));
  m.def("use_one_heap_arena", &torchmt::use_one_heap_arena);
  m.def("use_shape_free_cuda_attention", &torchmt::use_shape_free_cuda_attention);
  m.def("train", &torchmt::python::train);
  m.def("distill", &torchmt::python::distill);
  m.def("clean", &torchmt::python::clean);
  m.def("filter_corpus", &torchmt::python::filter_corpus);
  m.def("bleu", &torchmt::python::bleu);
  m.def("chrf", &torchmt::python::chrf);
}
