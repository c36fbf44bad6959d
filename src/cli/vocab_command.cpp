// torchmt vocab: trains the SentencePiece BPE model(s) a translation model is built on.
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>

#include "cli_options.h"
#include "util/atomic_file.h"
#include "torchmt/data/tokenizer.h"
#include "util/progress.h"
#include "torchmt/util/strings.h"

namespace torchmt::cli {

namespace {

void train_one(VocabTrainingOptions options, bool quiet) {
  const auto start = std::chrono::steady_clock::now();
  {
    const std::string what = "vocab " + options.model_prefix;
    Progress progress(what + ": reading", "lines", -1, quiet ? ProgressStyle::kQuiet : ProgressStyle::kAuto);
    const int pieces = options.vocab_size;
    const int64_t sample = options.input_sentence_size;
    int64_t lines = 0;
    options.lines_read = [&progress, &lines, what, pieces, sample, quiet](int64_t n, bool done) {
      progress.add(n);
      lines += n;
      if (!done) return;
      progress.finish();
      // SentencePiece's training says nothing until it ends: say what the wait is for, and on
      // how many sentences (a uniform sample of at most --input-sentence-size bounds the memory).
      if (!quiet)
        std::cerr << what << ": learning " << pieces << " pieces from " << with_thousands(std::min(sample, lines))
                  << " sentences sampled from " << with_thousands(lines) << " lines (--input-sentence-size "
                  << with_thousands(sample) << ")\n";
    };
    train_bpe_vocab(options);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Tokenizer tok = Tokenizer::load(options.model_prefix + ".model");
  std::cout << "wrote " << options.model_prefix << ".model and " << options.model_prefix << ".vocab ("
            << tok.vocab_size() << " pieces, checksum " << tok.checksum() << ", " << std::fixed
            << std::setprecision(1) << seconds << " s)\n";
}

struct VocabCommandOptions {
  std::string src, tgt, out;
  bool separate = false;
  bool quiet = false;
  VocabTrainingOptions training;
};

const OptionTable<VocabCommandOptions>& vocab_option_table() {
  using O = VocabCommandOptions;
  static const auto table = OptionTable<O>("vocab")
      .add("src", &O::src, "source-side training text (plain or .gz)")
      .add("tgt", &O::tgt, "target-side training text (plain or .gz)")
      .add("out", &O::out, "output prefix, e.g. spm/deen")
      .add("separate", &O::separate, "one model per language instead of a joint one")
      .add("vocab_size", [](O& o) -> int& { return o.training.vocab_size; }, "pieces per model")
      .add("input_sentence_size", [](O& o) -> int64_t& { return o.training.input_sentence_size; },
           "sentences sampled for training (bounds memory on large corpora)")
      .add("seed", [](O& o) -> uint32_t& { return o.training.seed; },
           "sampling seed (same seed and input -> same model)")
      .add("character_coverage", [](O& o) -> double& { return o.training.character_coverage; },
           "share of characters covered by pieces")
      .add("quiet", &O::quiet, "no progress on stderr", {"q", "", {}});
  return table;
}

int run_vocab(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(vocab_option_table(),
                         "Train a SentencePiece BPE vocabulary (pad 0, unk 1, bos 2, eos 3) on parallel text.\n"
                         "Joint by default (PREFIX.model, PREFIX.vocab), so embeddings can be shared;\n"
                         "--separate trains PREFIX.src.model and PREFIX.tgt.model.",
                         argc, argv, code);
  if (!o) return code;
  for (const auto& [value, name] : {std::pair{&o->src, "src"}, {&o->tgt, "tgt"}, {&o->out, "out"}}) {
    if (value->empty()) return usage_error(argv[0], std::string("missing required option --") + name);
  }
  VocabTrainingOptions base = o->training;
  if (base.vocab_size < 5) {
    std::cerr << argv[0] << ": --vocab-size must be at least 5 (4 special pieces + 1), got " << base.vocab_size
              << "\n";
    return kExitUsage;
  }
  if (base.input_sentence_size <= 0) {
    std::cerr << argv[0] << ": --input-sentence-size must be positive\n";
    return kExitUsage;
  }
  if (base.character_coverage <= 0.0 || base.character_coverage > 1.0) {
    std::cerr << argv[0] << ": --character-coverage must be in (0, 1]\n";
    return kExitUsage;
  }
  const std::string& src = o->src;
  const std::string& tgt = o->tgt;
  const std::string& out = o->out;
  std::vector<NamedPath> outputs;
  for (const char* side : o->separate ? std::vector<const char*>{".src", ".tgt"} : std::vector<const char*>{""})
    for (const char* kind : {".model", ".vocab"}) outputs.emplace_back("--out", out + side + kind);
  if (auto clash = same_file_twice({{"--src", src}, {"--tgt", tgt}}, outputs)) return usage_error(argv[0], *clash);
  if (o->separate) {
    VocabTrainingOptions s = base, t = base;
    s.inputs = {src};
    s.model_prefix = out + ".src";
    t.inputs = {tgt};
    t.model_prefix = out + ".tgt";
    train_one(s, o->quiet);
    train_one(t, o->quiet);
  } else {
    base.inputs = {src, tgt};
    base.model_prefix = out;
    train_one(base, o->quiet);
  }
  return kExitOk;
}

const CommandRegistration vocab_registration({"vocab", "train a SentencePiece BPE vocabulary on parallel text", run_vocab,
                                        10});

}  // namespace
}  // namespace torchmt::cli
