#include "torchmt/training/corpus_cleaning.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/binary_dataset.h"
#include "data/parallel_corpus.h"
#include "data/text_file.h"
#include "torchmt/data/language_identifier.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/util/strings.h"
#include "util/atomic_file.h"
#include "util/progress.h"

namespace torchmt {
namespace fs = std::filesystem;

const OptionTable<CleanOptions>& clean_option_table() {
  using O = CleanOptions;
  static const auto table =
      OptionTable<O>("clean")
          .include(corpus_filter_option_table(), &O::filter)
          .add("folds", &O::folds,
               "parts the corpus is cut into: each is scored by models trained on the others (2 or more; each part "
               "costs a forward and a backward training)", {"", "filter", {}})
          .add("rounds", &O::rounds,
               "rounds of cleaning: each after the first trains its models on the pairs the round before kept and "
               "filters the whole corpus again (each round costs 2 x --folds trainings)", {"", "filter", {}})
          // The corpus is --src/--tgt; the runs resume by themselves; every output column stays open.
          .include(train_option_table(), &O::training, "",
                   {"train_src", "train_tgt", "train_data", "resume", "output_columns"});
  return table;
}

namespace {

// A field of a record this pipeline wrote; a record that does not parse or lacks it is damaged.
template <class T>
T record_field(const std::string& path, const char* field, const std::string& remedy) {
  try {
    return nlohmann::json::parse(read_file(path)).at(field).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + " is damaged (" + e.what() + "): " + remedy);
  }
}

// The threshold clean uses when none is given: the validation pairs' quantile.
CorpusFilterOptions with_default_threshold(CorpusFilterOptions f, const TrainOptions& t) {
  if (f.max_score == 0 && f.keep_fraction == 0 && f.reference_src.empty() && f.reference_tgt.empty()) {
    f.reference_src = t.valid_src;
    f.reference_tgt = t.valid_tgt;
  }
  return f;
}

}  // namespace

void CleanOptions::validate() const {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
  };
  require(!filter.src.empty() && !filter.tgt.empty(), "give the corpus: --src and --tgt");
  require(folds >= 2, "--folds must be at least 2 (each part is scored by models trained on the others)");
  require(rounds >= 1, "--rounds must be at least 1");
  require(training.nproc_per_node == 1, "--nproc-per-node: clean trains its models in one process");
  require(!training.both_directions, "--both-directions: clean trains a model for each direction");
  const CorpusFilterOptions f = with_default_threshold(filter, training);
  require(!f.reference_src.empty() || f.max_score > 0 || f.keep_fraction > 0,
          "give the threshold's clean reference pairs: --valid-src/--valid-tgt (used unless told otherwise), "
          "--reference-src/--reference-tgt, --max-score or --keep-fraction");
  f.validate();
  TrainOptions t = training;
  t.train_src = filter.src;  // what validate() checks of a corpus; the parts' complements later
  t.train_tgt = filter.tgt;
  t.validate();
}

namespace {

// The pipeline's steps, each a method: the parts, the models, the filtering.
class Cleaning {
 public:
  Cleaning(CleanOptions options, const TrainHooks& hooks)
      : o_(std::move(options)), hooks_(hooks), out_(o_.training.out), log_(ProgressStyle::kAuto) {
    o_.filter = with_default_threshold(o_.filter, o_.training);
    // The parts' files carry the languages' suffixes, as the models' runs read them.
    const std::string s = !o_.training.source_language.empty() ? o_.training.source_language
                                                                : language_of_file_name(o_.filter.src);
    const std::string t = !o_.training.target_language.empty() ? o_.training.target_language
                                                                : language_of_file_name(o_.filter.tgt);
    const bool known = !s.empty() && !t.empty() && s != t;
    src_suffix_ = known ? s : "src";
    tgt_suffix_ = known ? t : "tgt";
  }

  CleanSummary run() {
    cut_parts();
    vocabulary();
    // Each training gets an equal share of what the budget has left.
    int64_t left = 2 * o_.folds * o_.rounds;
    for (int64_t r = 0; r < o_.rounds; ++r) {
      if (r > 0) write_rests(r);
      for (int64_t k = 0; k < o_.folds; ++k)
        for (const bool backward : {false, true}) {
          train_model(r, k, backward, left--);
          if (summary_.interrupted) return summary_;
        }
      summary_.report = CorpusFilterReport();
      summary_.thresholds.clear();
      for (int64_t k = 0; k < o_.folds; ++k) filter_part(r, k);
      if (o_.rounds > 1) say("clean: " + round_name(r) + ": " + summary_.report.summary());
    }
    join_outputs();
    return summary_;
  }

 private:
  // Round 1's files are in <out>/fold<k>, round r's in <out>/round<r>/fold<k>; the parts are round 1's.
  std::string round_dir(int64_t r) const { return r == 0 ? out_ : out_ + "/round" + std::to_string(r + 1); }
  std::string fold_dir(int64_t r, int64_t k) const { return round_dir(r) + "/fold" + std::to_string(k + 1); }
  std::string part_dir(int64_t k) const { return fold_dir(0, k); }
  std::string model_dir(int64_t r, int64_t k, bool backward) const {
    return fold_dir(r, k) + (backward ? "/backward" : "/forward");
  }
  std::string round_name(int64_t r) const {
    return "round " + std::to_string(r + 1) + " of " + std::to_string(o_.rounds);
  }
  // "round 2 of 2, fold 1", or "fold 1" when there is one round.
  std::string fold_name(int64_t r, int64_t k) const {
    return (o_.rounds > 1 ? round_name(r) + ", " : std::string()) + "fold " + std::to_string(k + 1);
  }

  void say(const std::string& text) {
    if (hooks_.on_progress) hooks_.on_progress(-1, text);
    log_.line(text);
  }

  // Step 1: the parts and their complements. A directory whose models learned another corpus or
  // other parts is refused, not mixed.
  void cut_parts() {
    const int64_t src_lines = count_lines(o_.filter.src), tgt_lines = count_lines(o_.filter.tgt);
    if (src_lines != tgt_lines)
      throw std::runtime_error(line_count_mismatch(o_.filter.src, src_lines, o_.filter.tgt, tgt_lines));
    if (src_lines < 2 * o_.folds)
      throw std::runtime_error(o_.filter.src + " has " + with_thousands(src_lines) + " lines: too few for --folds " +
                               std::to_string(o_.folds) + " (two lines a part at least)");
    lines_ = src_lines;
    for (int64_t k = 0; k <= o_.folds; ++k) bounds_.push_back(lines_ * k / o_.folds);
    const std::string key = fnv1a_hex("torchmt clean parts 1\n" + std::to_string(hash_file(o_.filter.src)) + "\n" +
                                      std::to_string(hash_file(o_.filter.tgt)) + "\nfolds " + std::to_string(o_.folds));
    const std::string record = out_ + "/parts.json";
    fs::create_directories(out_);
    if (fs::exists(record)) {
      if (record_field<std::string>(record, "key", "remove " + out_ + " to start again") != key)
        throw std::runtime_error(out_ + " holds models trained on another corpus or other --folds: remove it, or give "
                                        "another --out");
    } else {
      for (int64_t k = 0; k < o_.folds; ++k)
        if (fs::exists(part_dir(k)))
          throw std::runtime_error(part_dir(k) + " is not this pipeline's (no " + record +
                                   "): remove it, or give another --out");
    }
    // The record first: a run stopped while cutting leaves directories that are this pipeline's.
    atomic_write(record, nlohmann::json{{"key", key},
                                        {"src", fs::absolute(o_.filter.src).string()},
                                        {"tgt", fs::absolute(o_.filter.tgt).string()},
                                        {"lines", lines_},
                                        {"folds", o_.folds},
                                        {"bounds", bounds_}}
                             .dump(1) + "\n");
    // Written each run (a read of the corpus): the filter reads the parts, the trainings the rests.
    for (int64_t k = 0; k < o_.folds; ++k) fs::create_directories(part_dir(k));
    for (const auto& [input, suffix] : {std::pair{o_.filter.src, src_suffix_}, std::pair{o_.filter.tgt, tgt_suffix_}}) {
      std::vector<std::unique_ptr<AtomicFileWriter>> parts, rests;
      for (int64_t k = 0; k < o_.folds; ++k) {
        parts.push_back(std::make_unique<AtomicFileWriter>(part_dir(k) + "/part." + suffix));
        rests.push_back(std::make_unique<AtomicFileWriter>(part_dir(k) + "/rest." + suffix));
      }
      LineReader reader(input);
      std::string line;
      for (int64_t i = 0, part = 0; reader.next(line); ++i) {
        while (i >= bounds_[static_cast<size_t>(part) + 1]) ++part;
        line += '\n';
        for (int64_t k = 0; k < o_.folds; ++k) (k == part ? parts : rests)[static_cast<size_t>(k)]->write(line);
      }
      for (auto& w : parts) w->commit();
      for (auto& w : rests) w->commit();
    }
    for (int64_t k = 0; k < o_.folds; ++k)
      rest_pairs_.push_back(lines_ - (bounds_[static_cast<size_t>(k) + 1] - bounds_[static_cast<size_t>(k)]));
    say("clean: " + with_thousands(lines_) + " pairs in " + std::to_string(o_.folds) +
        " parts; each part is scored by a forward and a backward model trained on the others" +
        (o_.rounds > 1 ? ", in " + std::to_string(o_.rounds) + " rounds" : std::string()));
  }

  // Round r's training pairs: what round r - 1 kept of the other parts. The record refuses models
  // that learned what an earlier run's round r - 1 kept (other filter options) rather than mix them.
  void write_rests(int64_t r) {
    std::string hashes = "torchmt clean round 1\n";
    for (int64_t k = 0; k < o_.folds; ++k)
      for (const std::string& suffix : {src_suffix_, tgt_suffix_})
        hashes += std::to_string(hash_file(fold_dir(r - 1, k) + "/kept." + suffix)) + "\n";
    const std::string key = fnv1a_hex(hashes), record = round_dir(r) + "/round.json";
    if (fs::exists(record) &&
        record_field<std::string>(record, "key", "remove " + round_dir(r) + " to train its models again") != key)
      throw std::runtime_error(round_dir(r) + "'s models learned other pairs than " + round_name(r - 1) +
                               " keeps now (the filter's options changed?): remove " + round_dir(r) +
                               " to train them again");
    fs::create_directories(round_dir(r));
    atomic_write(record, nlohmann::json{{"key", key}}.dump(1) + "\n");
    for (int64_t k = 0; k < o_.folds; ++k) {
      fs::create_directories(fold_dir(r, k));
      for (const std::string& suffix : {src_suffix_, tgt_suffix_}) {
        AtomicFileWriter rest(fold_dir(r, k) + "/rest." + suffix);
        int64_t pairs = 0;
        for (int64_t j = 0; j < o_.folds; ++j) {
          if (j == k) continue;
          LineReader reader(fold_dir(r - 1, j) + "/kept." + suffix);
          for (std::string line; reader.next(line); ++pairs) rest.write(line + '\n');
        }
        rest.commit();
        rest_pairs_[static_cast<size_t>(k)] = pairs;
      }
    }
  }

  // One joint vocabulary for every model, learned from the whole corpus (both sides).
  void vocabulary() {
    if (!o_.training.spm.empty() || !o_.training.init_from.empty()) return;
    const std::string path = out_ + "/spm.model";
    o_.training.spm = path;
    if (fs::exists(path)) return;
    say("clean: training a joint " + std::to_string(o_.training.vocab_size) + " BPE vocabulary -> " + path);
    VocabTrainingOptions v;
    v.inputs = {o_.filter.src, o_.filter.tgt};
    v.model_prefix = out_ + "/spm";
    v.vocab_size = static_cast<int>(o_.training.vocab_size);
    v.seed = static_cast<uint32_t>(o_.training.seed);
    v.num_threads = static_cast<int>(o_.training.threads);
    train_bpe_vocab(v);
  }

  // Step 2: part k's forward (src -> tgt) or backward model, on the other parts. `left`: the
  // trainings still to run, this one included (the budget's share).
  void train_model(int64_t r, int64_t k, bool backward, int64_t left) {
    const std::string dir = model_dir(r, k, backward);
    const std::string done_path = dir + "/done.json";
    const std::string what = fold_name(r, k) + " of " + std::to_string(o_.folds) + ", " +
                             (backward ? "backward" : "forward") + " model";
    if (fs::exists(done_path)) {
      spent_ += record_field<double>(done_path, "seconds", "remove it to train that model again");
      ++summary_.reused;
      say("clean: " + what + ": " + dir + " (an earlier run's)");
      return;
    }
    TrainOptions t = o_.training;
    const std::string rest_src = fold_dir(r, k) + "/rest." + src_suffix_;
    const std::string rest_tgt = fold_dir(r, k) + "/rest." + tgt_suffix_;
    t.train_src = backward ? rest_tgt : rest_src;
    t.train_tgt = backward ? rest_src : rest_tgt;
    if (backward) {
      std::swap(t.valid_src, t.valid_tgt);
      std::swap(t.source_language, t.target_language);
    }
    // A part's targets hold pieces the other parts' do not: a closed column would score them as impossible.
    t.output_columns = "all";
    t.out = dir;
    t.resume = fs::exists(dir + "/checkpoint_last.pt");
    if (o_.training.max_minutes > 0) {
      const double minutes = (o_.training.max_minutes - spent_ / 60.0) / static_cast<double>(left);
      if (minutes < 0.1)
        throw std::runtime_error("--max-minutes " + real_text(o_.training.max_minutes) +
                                 ": the trainings before took " + clock_text(spent_) + ", which leaves " + what +
                                 " nothing (raise --max-minutes)");
      t.max_minutes = minutes;
    }
    say("clean: " + what + ": " + (t.resume ? "resuming " : "training ") + dir + " on " +
        (r > 0 ? "what " + round_name(r - 1) + " kept of " : std::string()) + "the other parts (" +
        with_thousands(rest_pairs_[static_cast<size_t>(k)]) + " pairs)" +
        (t.max_minutes > 0 ? " for at most " + clock_text(t.max_minutes * 60) : std::string()));
    const TrainSummary s = Trainer(t).run(hooks_);
    ++summary_.trained;
    summary_.train_seconds += s.train_seconds;
    if (s.interrupted) {
      summary_.interrupted = true;
      return;
    }
    spent_ += s.train_seconds;
    atomic_write(done_path, nlohmann::json{{"seconds", s.train_seconds}, {"steps", s.steps}}.dump(1) + "\n");
  }

  std::string model_path(int64_t r, int64_t k, bool backward) const {
    const std::string best = model_dir(r, k, backward) + "/checkpoint_best.pt";
    return fs::exists(best) ? best : model_dir(r, k, backward) + "/checkpoint_last.pt";
  }

  // Step 3: part k filtered by round r's models, into the round's directory.
  void filter_part(int64_t r, int64_t k) {
    TranslatorConfig config;
    config.device = o_.training.device;
    config.threads = o_.training.threads;
    config.dtype = "fp32";  // scores comparable across the parts whatever the machine
    config.runtime = hooks_.runtime;
    config.models = {model_path(r, k, false)};
    Translator forward = load_translator(config);
    config.models = {model_path(r, k, true)};
    Translator backward = load_translator(config);
    CorpusFilterOptions f = o_.filter;
    const std::string dir = fold_dir(r, k);
    f.src = part_dir(k) + "/part." + src_suffix_;
    f.tgt = part_dir(k) + "/part." + tgt_suffix_;
    f.kept_src = dir + "/kept." + src_suffix_;
    f.kept_tgt = dir + "/kept." + tgt_suffix_;
    if (!f.dropped.empty()) f.dropped = dir + "/dropped.tsv";
    if (!f.scores.empty()) f.scores = dir + "/scores.tsv";
    if (!f.realigned.empty()) f.realigned = dir + "/realigned.tsv";
    f.first_line = bounds_[static_cast<size_t>(k)] + 1;
    f.forward_name = fold_name(r, k) + "'s forward model " + model_path(r, k, false);
    f.backward_name = fold_name(r, k) + "'s backward model " + model_path(r, k, true);
    std::unique_ptr<Progress> progress;
    const std::string label = "clean: " + fold_name(r, k);
    CorpusFilterReport report;
    try {
      report = filter_corpus(
          forward, backward, config.translation, f,
          [&](const std::string& unit, int64_t total) {
            if (progress) progress->finish();
            progress = std::make_unique<Progress>(label, unit, total);
          },
          [&](int64_t n) { progress->add(n); });
    } catch (const std::invalid_argument& e) {
      // The roles are right by construction: a model that prefers the other direction learned too little.
      const std::string m = e.what();
      if (m.find("does not translate") == std::string::npos) throw;
      throw std::runtime_error(m.substr(0, m.find("; give the models")) +
                               ": it learned too little to score the corpus (more --max-steps or --max-minutes)");
    }
    if (progress) progress->finish();
    for (const auto& line : report.rules(f)) say(label + ": " + line);
    say(label + ": " + report.summary());
    summary_.report.add(report);
    summary_.thresholds.push_back(report.threshold);
  }

  // The last round's parts' outputs, in order, as the filter's files.
  void join_outputs() {
    const auto join = [&](const std::string& to, const std::string& name) {
      if (to.empty()) return;
      AtomicFileWriter out(to);
      std::vector<char> buffer(1 << 20);
      for (int64_t k = 0; k < o_.folds; ++k) {
        const std::string from = fold_dir(o_.rounds - 1, k) + "/" + name;
        std::ifstream in(from, std::ios::binary);
        if (!in) throw std::runtime_error("cannot read " + from);
        while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0)
          out.write(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
      }
      out.commit();
    };
    join(o_.filter.kept_src, "kept." + src_suffix_);
    join(o_.filter.kept_tgt, "kept." + tgt_suffix_);
    join(o_.filter.dropped, "dropped.tsv");
    join(o_.filter.scores, "scores.tsv");
    join(o_.filter.realigned, "realigned.tsv");
  }

  CleanOptions o_;
  const TrainHooks& hooks_;
  std::string out_, src_suffix_, tgt_suffix_;
  Progress log_;
  int64_t lines_ = 0;
  std::vector<int64_t> bounds_;  // part k: lines [bounds_[k], bounds_[k + 1])
  std::vector<int64_t> rest_pairs_;  // part k's models' training pairs, in the round being run
  double spent_ = 0;             // seconds the finished trainings took
  CleanSummary summary_;
};

}  // namespace

CleanSummary clean_corpus(CleanOptions options, const TrainHooks& hooks) {
  options.validate();
  for (const auto& [flag, path] : {std::pair{"--src", options.filter.src}, std::pair{"--tgt", options.filter.tgt}})
    if (!fs::is_regular_file(path)) throw std::runtime_error(std::string(flag) + " " + path + ": file not found");
  return Cleaning(std::move(options), hooks).run();
}

}  // namespace torchmt
