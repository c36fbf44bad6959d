#include "torchmt/training/distillation.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/binary_dataset.h"
#include "data/parallel_corpus.h"
#include "data/shortlist.h"
#include "data/text_file.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/util/strings.h"
#include "util/atomic_file.h"
#include "util/progress.h"
#include "util/stopwatch.h"
#include "util/stop_signals.h"
#include "util/utf8.h"

namespace torchmt {
namespace fs = std::filesystem;

// A longer length penalty than translate's 0.6: the teachers' lines then come out about as long as
// the references, and the student learns that length (validation BLEU: tools/bench/README.md).
DistillOptions::DistillOptions() {
  teacher.translation.search.beam_size = 5;
  teacher.translation.search.length_penalty = 1.5;
}

const OptionTable<DistillOptions>& distill_option_table() {
  using O = DistillOptions;
  const OptionExtra group{"", "distillation", {}};
  static const auto table =
      OptionTable<O>("distill")
          .include(translator_option_table(), &O::teacher, "teacher_")
          .add("with_originals", &O::with_originals,
               "the student trains on the original pairs (--train-src, --train-tgt) as well as on the teachers' "
               "translations", group)
          .add("back_translate", &O::back_translate,
               "the teachers also translate the training targets (--train-tgt) back into the source language, and "
               "the student trains on those pairs as well (data diversification); the teachers must translate both "
               "ways (trained with --both-directions)", group)
          .add("chunk_lines", &O::chunk_lines,
               "source lines the teachers translate between two saves of their corpus (an interrupted run "
               "translates at most this many again)", group)
          .include(train_option_table(), &O::student);
  return table;
}

void DistillOptions::validate() const {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
  };
  require(!teacher.models.empty(), "missing required option --teacher-model (the teacher; repeated: an ensemble)");
  require(!student.train_src.empty(), "missing required option --train-src (the sources the teachers translate)");
  require(student.train_data.empty(), "--train-data: distill reads text (--train-src, and --train-tgt with "
                                      "--with-originals or --back-translate), not a dataset or a corpus list");
  require(!with_originals || !student.train_tgt.empty(), "--with-originals needs --train-tgt");
  require(!back_translate || !student.train_tgt.empty(), "--back-translate needs --train-tgt (the targets the teachers "
                                                         "translate back)");
  require(chunk_lines >= 1, "--chunk-lines must be at least 1");
  require(student.nproc_per_node == 1, "--nproc-per-node: distill trains its student in one process");
  try {
    teacher.validate();
  } catch (const std::invalid_argument& e) {
    // The translator's messages name the translate command's flags; here they are the teacher's.
    std::string m = e.what();
    for (size_t at = m.find("--"); at != std::string::npos; at = m.find("--", at + 10)) m.insert(at + 2, "teacher-");
    throw std::invalid_argument(m);
  }
  TrainOptions s = student;
  if (s.train_tgt.empty()) s.train_tgt = s.train_src;  // the teachers' translations, later
  s.validate();
}

namespace {

// A longer source line is not translated (the corpus reader's limit: it would be skipped as too long).
constexpr size_t kMaxSourceLineBytes = size_t{1} << 20;

// "train.de.gz" -> "de"; "" when the name has no suffix.
std::string suffix_of(const std::string& path) {
  fs::path p(path);
  if (p.extension() == ".gz") p = p.stem();
  const std::string ext = p.extension().string();
  return ext.size() > 1 ? ext.substr(1) : "";
}

// Appends and fsyncs, so that what the progress file counts is on disk before it is counted.
void append_durably(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("cannot write " + path + ": " + std::strerror(error));
    }
    at += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) throw std::runtime_error("cannot write " + path + ": " + std::strerror(error));
}

// The pipeline's steps, each a method: the teachers' corpus, the student, the shortlist.
class Distillation {
 public:
  Distillation(DistillOptions options, const TrainHooks& hooks)
      : o_(std::move(options)),
        hooks_(hooks),
        out_(o_.student.out),
        teacher_dir_(out_ + "/teacher"),
        log_(ProgressStyle::kAuto) {
    o_.teacher.runtime = hooks.runtime;
  }

  DistillSummary run() {
    const TeacherCorpus forward = teacher_corpus({o_.student.train_src, teacher_dir_, "teachers", false});
    summary_.teacher_src = forward.input_copy;
    summary_.teacher_tgt = forward.translation;
    summary_.teacher_lines = forward.lines;
    summary_.untranslated_lines = forward.untranslated;
    summary_.teacher_reused = forward.reused;
    summary_.teacher_seconds = forward.seconds;
    if (summary_.interrupted) return summary_;
    if (o_.back_translate) {
      const TeacherCorpus back = teacher_corpus({o_.student.train_tgt, teacher_dir_ + "/back", "teachers, back", true});
      summary_.back_src = back.translation;
      summary_.back_tgt = back.input_copy;
      summary_.back_lines = back.lines;
      summary_.untranslated_lines += back.untranslated;
      summary_.teacher_reused = summary_.teacher_reused && back.reused;
      summary_.teacher_seconds += back.seconds;
      if (summary_.interrupted) return summary_;
    }
    train_student();
    if (summary_.interrupted) return summary_;
    build_shortlist();
    return summary_;
  }

 private:
  // One way the teachers translate: the lines of `input` into `dir`, where a copy of them (line for
  // line) stands beside their translations. Forward: the sources; back: the targets.
  struct TeacherPass {
    std::string input, dir, label;
    bool back = false;
  };
  struct TeacherCorpus {
    std::string input_copy, translation;
    int64_t lines = 0, untranslated = 0;
    double seconds = 0;
    bool reused = false;
  };

  void say(const std::string& text) {
    if (hooks_.on_progress) hooks_.on_progress(-1, text);
    log_.line(text);
  }

  // What the teachers' corpus is a function of: a run with the same key reuses it.
  std::string teacher_key(const TeacherPass& pass) const {
    const auto& t = o_.teacher;
    const auto& s = t.translation.search;
    std::string k = "torchmt distill teacher corpus 1\n";
    for (const auto& m : t.models) k += std::to_string(hash_file(m)) + "\n";
    k += "weights " + t.ensemble_weights + "\nsource " + std::to_string(hash_file(pass.input)) + "\n";
    if (pass.back) k += "back\n";
    if (!t.shortlist.empty()) k += "shortlist " + std::to_string(hash_file(t.shortlist)) + "\n";
    k += "dtype " + t.dtype + "\nbeam " + std::to_string(s.beam_size) + " nbest " + std::to_string(s.nbest) +
         " lenpen " + real_text(s.length_penalty) + " len " + real_text(s.max_len_a) + " " +
         std::to_string(s.max_len_b) + " early " + std::to_string(s.early_exit) + " sampling " +
         std::to_string(s.sampling_topk) + " " + real_text(s.sampling_topp) + " " +
         real_text(s.sampling_temperature) + " " + std::to_string(s.seed) + "\n";
    if (s.patience != 1.0) k += "patience " + real_text(s.patience) + "\n";
    if (s.token_rules())  // (only then: the keys of corpora made before the rules stay as they were)
      k += "rules " + std::to_string(s.min_length) + " " + std::to_string(s.disable_unk) + " " +
           std::to_string(s.no_repeat_ngram_size) + " " + real_text(s.repetition_penalty) + "\n";
    return fnv1a_hex(k);
  }

  // Step 1: <out>/teacher/train.<src>, train.<tgt>, manifest.json (with back_translate also
  // <out>/teacher/back/: the targets and their translations); while under way the same names with
  // ".partial" and progress.json (lines done, bytes of each file, seconds spent).
  TeacherCorpus teacher_corpus(const TeacherPass& pass) {
    for (const auto& m : o_.teacher.models)
      if (!fs::exists(m)) throw std::runtime_error("--teacher-model " + m + ": file not found");
    const std::string flag = pass.back ? "--train-tgt " : "--train-src ";
    if (!fs::exists(pass.input)) throw std::runtime_error(flag + pass.input + ": file not found");
    fs::create_directories(pass.dir);
    const std::string key = teacher_key(pass);
    const std::string manifest_path = pass.dir + "/manifest.json";
    if (fs::exists(manifest_path)) try {
      const auto m = read_json(manifest_path);
      // The files by their names in this directory: a moved or copied pipeline directory still reads.
      // "src" names the source language's file, "tgt" the target language's, whichever way it went.
      const std::string src = pass.dir + "/" + m.value("src", ""), tgt = pass.dir + "/" + m.value("tgt", "");
      if (m.value("key", "") == key && fs::is_regular_file(src) && fs::is_regular_file(tgt)) {
        TeacherCorpus c{pass.back ? tgt : src, pass.back ? src : tgt, m.at("lines").get<int64_t>(),
                        m.at("untranslated").get<int64_t>(), m.at("seconds").get<double>(), true};
        say(pass.label + ": their translations of " + with_thousands(c.lines) + " lines are in " + c.translation +
            " (an earlier run's)");
        return c;
      }
      say(pass.label + ": the teachers, the " + (pass.back ? "targets" : "sources") + " or the search changed since " +
          manifest_path + " was written: translating again");
      fs::remove(manifest_path);
    } catch (const nlohmann::json::exception& e) {
      throw damaged(manifest_path, e);
    }
    if (fs::exists(out_ + "/student/checkpoint_last.pt"))
      throw std::runtime_error(out_ + "/student holds a student trained on other teacher translations than these "
                                      "will be: remove it, or give another --out");
    return translate_lines(pass, key, manifest_path);
  }

  TeacherCorpus translate_lines(const TeacherPass& pass, const std::string& key, const std::string& manifest_path) {
    const Stopwatch watch;  // loading included: what the budget pays for
    Translator teacher = load_translator(o_.teacher);
    const ModelLanguages& languages = teacher.languages();
    const std::string src_code = !languages.source.empty() ? languages.source : suffix_of(o_.student.train_src);
    const std::string tgt_code = !languages.target.empty() ? languages.target
                                 : !o_.student.train_tgt.empty() ? suffix_of(o_.student.train_tgt) : "";
    // Checked by whichever pass loads the teachers first: a one-way teacher is refused before it translates anything.
    if (o_.back_translate && !languages.both_directions)
      throw std::invalid_argument("--back-translate: the teachers translate " +
                                  (src_code.empty() ? std::string("one way") : src_code + " -> " + tgt_code) +
                                  " only; back-translation needs teachers trained with --both-directions");
    const std::string src_path = pass.dir + "/train." + (src_code.empty() || src_code == tgt_code ? "src" : src_code);
    const std::string tgt_path = pass.dir + "/train." + (tgt_code.empty() || src_code == tgt_code ? "tgt" : tgt_code);
    // Forward the sources are copied beside their translations; back the targets.
    const std::string input_path = pass.back ? tgt_path : src_path, output_path = pass.back ? src_path : tgt_path;
    // One SentencePiece model on both sides: the student can share it (and its shortlist).
    if (!pass.back && teacher.src_tokenizer().checksum() == teacher.tgt_tokenizer().checksum() &&
        !teacher.src_tokenizer().has_vocabulary())
      atomic_write(pass.dir + "/spm.model", teacher.src_tokenizer().serialized());

    const std::string input_partial = input_path + ".partial", output_partial = output_path + ".partial";
    const std::string progress_path = pass.dir + "/progress.json";
    // The records count bytes by language, as they name files: src_bytes, tgt_bytes.
    const char* input_key = pass.back ? "tgt_bytes" : "src_bytes";
    const char* output_key = pass.back ? "src_bytes" : "tgt_bytes";
    int64_t done = 0, untranslated = 0;
    double seconds_before = 0;
    if (fs::exists(progress_path)) try {
      const auto p = read_json(progress_path);
      if (p.value("key", "") == key && fs::exists(input_partial) && fs::exists(output_partial) &&
          fs::file_size(input_partial) >= p.at(input_key).get<uint64_t>() &&
          fs::file_size(output_partial) >= p.at(output_key).get<uint64_t>()) {
        // What was appended after the last count is a chunk cut short: dropped.
        fs::resize_file(input_partial, p.at(input_key).get<uint64_t>());
        fs::resize_file(output_partial, p.at(output_key).get<uint64_t>());
        done = p.at("lines").get<int64_t>();
        untranslated = p.at("untranslated").get<int64_t>();
        seconds_before = p.at("seconds").get<double>();
      }
    } catch (const nlohmann::json::exception& e) {
      throw damaged(progress_path, e);
    }
    if (done == 0) {
      for (const auto& f : {input_partial, output_partial}) fs::remove(f);
    }
    const int64_t total = count_lines(pass.input);
    say(pass.label + ": " + (done > 0 ? "going on from line " + with_thousands(done) + " of " : std::string("translating ")) +
        with_thousands(total) + (pass.back ? " target lines with " : " source lines with ") +
        std::to_string(o_.teacher.models.size()) + " model" + (o_.teacher.models.size() > 1 ? "s" : "") + " (" +
        teacher.precision_name() + ", beam " + std::to_string(o_.teacher.translation.search.beam_size) + ", " +
        std::to_string(o_.teacher.translation.search.nbest) + "-best) -> " + output_path);

    StopSignals signals(hooks_.stop_on_signals);
    Progress progress(pass.label, "lines", total - done);
    LineReader reader(pass.input);
    reader.set_max_line_bytes(kMaxSourceLineBytes);
    std::string line;
    for (int64_t skipped = 0; skipped < done && reader.next(line); ++skipped) {
    }
    TranslationOptions options = o_.teacher.translation;
    uint64_t input_bytes = fs::exists(input_partial) ? fs::file_size(input_partial) : 0;
    uint64_t output_bytes = fs::exists(output_partial) ? fs::file_size(output_partial) : 0;
    const Stopwatch translating;
    while (true) {
      std::vector<std::string> chunk;
      std::vector<char> cut;
      while (static_cast<int64_t>(chunk.size()) < o_.chunk_lines && reader.next(line)) {
        chunk.push_back(line);
        cut.push_back(reader.truncated());
      }
      if (chunk.empty()) break;
      // Lines no model can read get an empty translation, so the corpus keeps its line numbers
      // (the student's corpus reader skips them and counts them).
      std::vector<std::string> inputs;
      std::vector<size_t> input_of(chunk.size(), SIZE_MAX);
      for (size_t i = 0; i < chunk.size(); ++i) {
        if (cut[i] || Translator::is_blank(chunk[i]) || !is_valid_utf8(chunk[i])) continue;
        input_of[i] = inputs.size();
        inputs.push_back(chunk[i]);
      }
      options.first_line = done;
      std::vector<Translation> translations;
      try {
        translations = teacher.translate(inputs, options, [&](int64_t n) {
          progress.add(n);
          StopSignals::throw_if_requested("translating with the teachers");
        });
      } catch (const StopRequested&) {
        progress.finish();
        summary_.interrupted = true;
        say(pass.label + ": interrupted; " + with_thousands(done) + " of " + with_thousands(total) +
            " lines are saved, the next run goes on from there");
        return {};
      }
      std::string input_text, output_text;
      for (size_t i = 0; i < chunk.size(); ++i) {
        if (input_of[i] == SIZE_MAX) {
          ++untranslated;
          progress.add(1);
          input_text += chunk[i] + "\n";
          output_text += "\n";
          continue;
        }
        for (const auto& text : translations[input_of[i]].texts) {
          input_text += chunk[i] + "\n";
          output_text += text + "\n";
        }
      }
      append_durably(input_partial, input_text);
      append_durably(output_partial, output_text);
      input_bytes += input_text.size();
      output_bytes += output_text.size();
      done += static_cast<int64_t>(chunk.size());
      atomic_write(progress_path, nlohmann::json{{"key", key},
                                                 {"lines", done},
                                                 {"untranslated", untranslated},
                                                 {input_key, input_bytes},
                                                 {output_key, output_bytes},
                                                 {"seconds", seconds_before + watch.seconds()}}
                                      .dump(1));
      // The caller's callback hears of each saved chunk; stderr has the progress line.
      if (hooks_.on_progress)
        hooks_.on_progress(-1, pass.label + ": " + with_thousands(done) + " of " + with_thousands(total) + " lines saved");
    }
    progress.finish();
    fs::rename(input_partial, input_path);
    fs::rename(output_partial, output_path);
    const TeacherCorpus c{input_path, output_path, done, untranslated, seconds_before + watch.seconds(), false};
    atomic_write(manifest_path, nlohmann::json{{"key", key},
                                               {"teachers", o_.teacher.models},
                                               {pass.back ? "targets" : "source", fs::absolute(pass.input).string()},
                                               {"src", fs::path(src_path).filename().string()},
                                               {"tgt", fs::path(tgt_path).filename().string()},
                                               {"lines", done},
                                               {"untranslated", untranslated},
                                               {"beam", o_.teacher.translation.search.beam_size},
                                               {"nbest", o_.teacher.translation.search.nbest},
                                               {"precision", teacher.precision_name()},
                                               {"seconds", c.seconds}}
                                    .dump(1) +
                                    "\n");
    fs::remove(progress_path);
    say(pass.label + ": " + with_thousands(done) + " lines translated in " + clock_text(translating.seconds()) +
        (untranslated > 0 ? " (" + with_thousands(untranslated) + " empty, not UTF-8 or over 1 MB: left untranslated)"
                          : std::string()));
    return c;
  }

  // Step 2: the student, on the teachers' corpus (and the original pairs), in <out>/student.
  void train_student() {
    TrainOptions s = o_.student;
    s.out = out_ + "/student";
    if (o_.with_originals || o_.back_translate) {
      const std::string list = teacher_dir_ + "/corpora.yaml";
      // Equal weights: as many pairs drawn from each (one per source line). Absolute paths: the list
      // reads the same from any directory.
      auto entry = [](const std::string& name, const std::string& src, const std::string& tgt) {
        return "  - {name: " + name + ", src: " + quoted(fs::absolute(src).string()) +
               ", tgt: " + quoted(fs::absolute(tgt).string()) + ", weight: 1}\n";
      };
      std::string text = "corpora:\n" + entry("teachers", summary_.teacher_src, summary_.teacher_tgt);
      if (o_.back_translate) text += entry("back", summary_.back_src, summary_.back_tgt);
      if (o_.with_originals) text += entry("originals", s.train_src, s.train_tgt);
      atomic_write(list, text);
      s.train_data = list;
      s.train_src.clear();
      s.train_tgt.clear();
    } else {
      s.train_src = summary_.teacher_src;
      s.train_tgt = summary_.teacher_tgt;
    }
    if (s.spm.empty() && s.init_from.empty() && fs::exists(teacher_dir_ + "/spm.model")) s.spm = teacher_dir_ + "/spm.model";
    if (s.max_minutes > 0) {
      const double left = o_.student.max_minutes - summary_.teacher_seconds / 60.0;
      if (left < 0.1)
        throw std::runtime_error("--max-minutes " + real_text(o_.student.max_minutes) + ": the teachers took " +
                                 clock_text(summary_.teacher_seconds) +
                                 " of it, which leaves the student nothing (raise --max-minutes)");
      s.max_minutes = left;
    }
    s.resume = fs::exists(s.out + "/checkpoint_last.pt");
    say(std::string("student: ") + (s.resume ? "resuming " : "training ") + s.out + " on " +
        (o_.back_translate ? "the teachers' translations both ways" : "the teachers' translations") +
        (o_.with_originals ? " and the original pairs" : "") +
        (s.max_minutes > 0 ? " for at most " + clock_text(s.max_minutes * 60) + " of training" : std::string()));
    summary_.student = Trainer(s).run(hooks_);
    summary_.interrupted = summary_.student.interrupted;
  }

  // Step 3: the student's shortlist, from the corpus it learned from, in the vocabulary its
  // checkpoint carries (a --spm file's, one trained into the run, or an --init-from checkpoint's).
  void build_shortlist() {
    const Translator student = load_translator(out_ + "/student/checkpoint_last.pt", torch::kCPU, torch::kFloat);
    const Tokenizer& src = student.src_tokenizer();
    const Tokenizer& tgt = student.tgt_tokenizer();
    CorpusOptions corpus_options;
    corpus_options.max_sentence_tokens = int64_t{1} << 20;  // nothing skipped for length
    const auto corpus = load_parallel_corpus(summary_.teacher_src, summary_.teacher_tgt, src, tgt, corpus_options);
    const auto shortlist = Shortlist::build(corpus, src, tgt, ShortlistOptions{});
    summary_.shortlist = out_ + "/shortlist.txt";
    shortlist.save(summary_.shortlist);
    say("shortlist: " + summary_.shortlist + " from " + with_thousands(corpus.size()) + " pairs");
  }

  static std::string quoted(const std::string& path) { return nlohmann::json(path).dump(); }

  static std::runtime_error damaged(const std::string& path, const std::exception& e) {
    return std::runtime_error(path + " is damaged (" + e.what() + "): remove it to start that step again");
  }
  // A record this pipeline wrote; one that does not parse, or lacks a field (at()), is damaged.
  static nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

  DistillOptions o_;
  const TrainHooks& hooks_;
  std::string out_, teacher_dir_;
  Progress log_;
  DistillSummary summary_;
};

}  // namespace

DistillSummary distill(DistillOptions options, const TrainHooks& hooks) {
  options.validate();
  // A corpus whose sides disagree: said now, not after the teachers have translated it.
  if (const auto& s = options.student; !s.train_tgt.empty()) {
    const int64_t src_lines = count_lines(s.train_src), tgt_lines = count_lines(s.train_tgt);
    if (src_lines != tgt_lines) throw std::runtime_error(line_count_mismatch(s.train_src, src_lines, s.train_tgt, tgt_lines));
  }
  return Distillation(std::move(options), hooks).run();
}

}  // namespace torchmt
