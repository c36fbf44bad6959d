// bench_data: the data layer's costs on Multi30k (tools/get_data.sh first).
//   time to train the joint 8k BPE vocabulary on train.{de,en}
//   time to encode + batch the 29,000 training pairs, cold and from the cache
//   padding fraction of the --batch-tokens batches, and the kept/skipped summary
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "torchmt/data/parallel_corpus.h"
#include "torchmt/data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/util/atomic_file.h"
#include "torchmt/util/strings.h"

namespace fs = std::filesystem;
using namespace torchmt;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Run {
  double load_s = 0, batch_s = 0;
  EncodedCorpus corpus;
  int64_t batches = 0;
  double padding = 0;
  int64_t oversized = 0;
};

// Loads (encoding or reading the cache) and cuts one epoch of batches into CPU tensors.
Run encode_and_batch(const std::string& src, const std::string& tgt, const Tokenizer& tok,
                     const CorpusOptions& corpus_options, int64_t batch_tokens) {
  Run run;
  auto start = std::chrono::steady_clock::now();
  run.corpus = load_parallel_corpus(src, tgt, tok, tok, corpus_options);
  run.load_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  TokenBatcher batcher(run.corpus, {batch_tokens, 1, true});
  for (int64_t i = 0; i < batcher.batches_per_epoch(); ++i) batcher.next(torch::kCPU);
  run.batch_s = seconds_since(start);
  run.batches = batcher.batches_per_epoch();
  run.padding = batcher.padding_fraction();
  run.oversized = batcher.oversized_pairs();
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_data", "Vocabulary, encoding and batching costs on Multi30k.");
  options.add_options()("data-dir", "Multi30k directory", cxxopts::value<std::string>()->default_value("data/multi30k"))(
      "vocab-size", "joint BPE pieces", cxxopts::value<int>()->default_value("8000"))(
      "batch-tokens", "rows x (source + target) tokens per batch, padding included", cxxopts::value<int64_t>()->default_value("4096"))(
      "max-sentence-tokens", "longest side kept, in tokens", cxxopts::value<int64_t>()->default_value("256"))(
      "work-dir", "scratch directory (removed first)",
      cxxopts::value<std::string>()->default_value((fs::temp_directory_path() / "torchmt_bench_data").string()))(
      "h,help", "show this help");
  cxxopts::ParseResult r;
  try {
    r = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_data: " << e.what() << "\n";
    return 2;
  }
  if (r.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  const std::string dir = r["data-dir"].as<std::string>();
  const std::string src = dir + "/train.de.gz", tgt = dir + "/train.en.gz";
  const fs::path work = r["work-dir"].as<std::string>();
  const int64_t batch_tokens = r["batch-tokens"].as<int64_t>();
  try {
    if (!fs::exists(src) || !fs::exists(tgt)) {
      throw std::runtime_error("'" + src + "' not found: run tools/get_data.sh first");
    }
    remove_tree(work.string());
    fs::create_directories(work);
    std::cout << std::fixed << std::setprecision(3) << "bench_data on " << src << " + " << tgt << " ("
              << std::thread::hardware_concurrency() << " hardware threads)\n";

    VocabTrainingOptions vocab;
    vocab.inputs = {src, tgt};
    vocab.model_prefix = (work / "deen").string();
    vocab.vocab_size = r["vocab-size"].as<int>();
    auto start = std::chrono::steady_clock::now();
    train_bpe_vocab(vocab);
    const double vocab_s = seconds_since(start);
    Tokenizer tok = Tokenizer::load(vocab.model_prefix + ".model");
    std::cout << "train joint BPE vocabulary (" << tok.vocab_size() << " pieces): " << vocab_s << " s\n";

    CorpusOptions corpus_options;
    corpus_options.max_sentence_tokens = r["max-sentence-tokens"].as<int64_t>();
    corpus_options.cache_dir = (work / "cache").string();
    Run cold = encode_and_batch(src, tgt, tok, corpus_options, batch_tokens);
    Run warm = encode_and_batch(src, tgt, tok, corpus_options, batch_tokens);
    if (!warm.corpus.from_cache) throw std::runtime_error("the second load did not come from the cache");
    std::cout << "encode + batch " << with_thousands(cold.corpus.stats.total) << " pairs, cold:   " << cold.load_s
              << " s encode + " << cold.batch_s << " s batch = " << cold.load_s + cold.batch_s << " s\n"
              << "encode + batch " << with_thousands(warm.corpus.stats.total) << " pairs, cached: " << warm.load_s
              << " s load   + " << warm.batch_s << " s batch = " << warm.load_s + warm.batch_s << " s\n"
              << "cache file: " << fs::file_size(corpus_cache_path(src, tgt, tok, tok, corpus_options)) / 1024
              << " KiB\n"
              << "--batch-tokens " << batch_tokens << ": " << cold.batches << " batches per epoch, padding "
              << std::setprecision(1) << 100.0 * cold.padding << "%, " << cold.oversized << " oversized pairs\n"
              << cold.corpus.stats.summary() << " (max-sentence-tokens " << corpus_options.max_sentence_tokens << ")\n";
    remove_tree(work.string());
  } catch (const std::exception& e) {
    std::cerr << "bench_data: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
