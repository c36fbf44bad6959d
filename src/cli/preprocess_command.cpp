// torchmt preprocess: encodes a parallel corpus once into a binary dataset that any number of
// training runs map (`train --train-data DIR`).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "cli_options.h"
#include "data/binary_dataset.h"
#include "util/progress.h"
#include "util/stop_signals.h"
#include "util/thread_team.h"
#include "torchmt/util/strings.h"

namespace torchmt::cli {

namespace {

struct PreprocessCommandOptions {
  std::string src, tgt, spm, out, verify;
  int64_t max_sentence_tokens = 256;
  int64_t threads = 0;
  bool quiet = false;
};

const OptionTable<PreprocessCommandOptions>& preprocess_option_table() {
  using O = PreprocessCommandOptions;
  static const auto table = OptionTable<O>("preprocess")
      .add("src", &O::src, "source-side text (plain or .gz), one sentence per line")
      .add("tgt", &O::tgt, "target-side text, line-aligned with --src")
      .add("spm", &O::spm, "the joint SentencePiece model to encode with (torchmt vocab)")
      .add("out", &O::out, "the dataset directory to create", {"o", "", {}})
      .add("max_sentence_tokens", &O::max_sentence_tokens,
           "skip a pair when a side has more tokens than this (eos included); nothing is truncated")
      .add("threads", &O::threads, "encoding threads (0 = all cores)")
      .add("verify", &O::verify, "instead: check the dataset directory DIR (complete, sizes, checksums) and describe it")
      .add("quiet", &O::quiet, "no progress on stderr", {"q", "", {}});
  return table;
}

int run_preprocess(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(preprocess_option_table(),
                         "Encode a parallel corpus into a binary dataset for `torchmt train --train-data DIR`:\n"
                         "token ids in flat arrays, memory-mapped by training, with a checksum per file.",
                         argc, argv, code);
  if (!o) return code;
  if (!o->verify.empty()) {
    const auto d = BinaryDataset::open(o->verify);
    const DatasetManifest& m = d->manifest();
    std::cout << o->verify << ": " << with_thousands(m.pairs) << " pairs, " << with_thousands(m.src_tokens) << " + "
              << with_thousands(m.tgt_tokens) << " tokens (" << m.token_bytes * 8 << "-bit ids, vocabulary "
              << m.vocab_size << ", SentencePiece " << m.tokenizer_checksum << "); " << m.stats.summary() << "; from "
              << m.src.path << " and " << m.tgt.path << "; every checksum verified\n";
    return kExitOk;
  }
  for (const auto& [value, name] :
       {std::pair{&o->src, "src"}, {&o->tgt, "tgt"}, {&o->spm, "spm"}, {&o->out, "out"}}) {
    if (value->empty()) return usage_error(argv[0], std::string("missing required option --") + name);
  }
  if (o->max_sentence_tokens < 2 || o->max_sentence_tokens > 65535)
    return usage_error(argv[0], "--max-sentence-tokens must be in [2, 65535]");
  if (o->threads < 0 || o->threads > kMaxThreads)
    return usage_error(argv[0], "--threads must be in [0, " + std::to_string(kMaxThreads) + "]");
  const Tokenizer tokenizer = Tokenizer::load(o->spm);
  PreprocessOptions options;
  options.corpus.max_sentence_tokens = o->max_sentence_tokens;
  options.corpus.num_threads = static_cast<int>(o->threads);
  std::optional<Progress> progress;
  options.lines_counted = [&](int64_t lines) {
    progress.emplace("preprocess " + o->out, "pairs", lines, o->quiet ? ProgressStyle::kQuiet : ProgressStyle::kAuto);
  };
  options.lines_done = [&](int64_t lines) { progress->add(lines); };
  const auto start = std::chrono::steady_clock::now();
  // SIGINT/SIGTERM end the work between chunks, leaving no dataset and no partial directory.
  StopSignals signals;
  options.should_stop = [] { return StopSignals::requested(); };
  DatasetManifest m;
  try {
    m = preprocess_corpus(o->src, o->tgt, tokenizer, o->out, options);
  } catch (const StopRequested& e) {
    std::cerr << argv[0] << ": " << e.what() << ": nothing written\n";
    return 130;
  }
  if (progress) progress->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t bytes = 0;
  for (const auto& f : m.files) bytes += f.bytes;
  const int64_t tokens = m.src_tokens + m.tgt_tokens;
  char figures[200];
  std::snprintf(figures, sizeof(figures), "%.1f s, %.0f pairs/s; %.1f MB on disk, %.2f bytes per token", seconds,
                static_cast<double>(m.stats.total) / std::max(seconds, 1e-9), static_cast<double>(bytes) / 1e6,
                tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0.0);
  std::cout << "wrote " << o->out << ": " << m.stats.summary() << "; " << with_thousands(tokens) << " tokens ("
            << figures << ")\n";
  return kExitOk;
}

const CommandRegistration preprocess_registration({"preprocess",
                                                   "encode a parallel corpus into a binary dataset for training",
                                                   run_preprocess, 15});

}  // namespace
}  // namespace torchmt::cli
