// bench_data: the data layer's costs, on Multi30k (tools/get_data.sh first) or on any corpus:
//   training the joint BPE vocabulary (Multi30k only, when no --spm is given)
//   `preprocess`: pairs/s and bytes per token on disk
//   opening the dataset (checksums verified), and building the batcher at each --windows size:
//   its start-up time and the padding of its batches
//   the batcher alone: target tokens/s of next() on the CPU, against 20x what an H100 trains
//   `base` at (265,000 target tokens/s measured: the batcher must never be why a GPU waits)
//   peak RSS of this process
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "data/binary_dataset.h"
#include "data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "util/atomic_file.h"
#include "torchmt/util/strings.h"
#include "kernels/cpu_isa.h"

namespace fs = std::filesystem;
using namespace torchmt;

namespace {

constexpr double kH100BaseTokensPerSecond = 265000;  // bench_train, base, bf16, H100 (tools/bench/README.md)

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  cxxopts::Options options("bench_data", "Preprocessing, dataset and batching costs.");
  options.add_options()("data-dir", "Multi30k directory (when no --src/--dataset)",
                        cxxopts::value<std::string>()->default_value("data/multi30k"))(
      "src", "source text to preprocess (with --tgt and --spm)", cxxopts::value<std::string>()->default_value(""))(
      "tgt", "target text", cxxopts::value<std::string>()->default_value(""))(
      "spm", "SentencePiece model for --src/--tgt", cxxopts::value<std::string>()->default_value(""))(
      "dataset", "an existing dataset directory (skips preprocessing)", cxxopts::value<std::string>()->default_value(""))(
      "vocab-size", "joint BPE pieces (Multi30k)", cxxopts::value<int>()->default_value("8000"))(
      "batch-tokens", "rows x (source + target) tokens per batch, padding included",
      cxxopts::value<int64_t>()->default_value("4096"))(
      "windows", "batcher windows to compare (pairs; 0 = one global sort)",
      cxxopts::value<std::string>()->default_value("0,65536,262144,1048576"))(
      "batches", "batches timed for the throughput figure", cxxopts::value<int64_t>()->default_value("3000"))(
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
  const fs::path work = r["work-dir"].as<std::string>();
  const int64_t batch_tokens = r["batch-tokens"].as<int64_t>();
  try {
    std::cout << std::fixed << std::setprecision(3) << "bench_data (" << std::thread::hardware_concurrency()
              << " hardware threads)\n";
    std::string dataset_dir = r["dataset"].as<std::string>();
    if (dataset_dir.empty()) {
      remove_tree(work.string());
      fs::create_directories(work);
      std::string src = r["src"].as<std::string>(), tgt = r["tgt"].as<std::string>(), spm = r["spm"].as<std::string>();
      if (src.empty()) {
        const std::string dir = r["data-dir"].as<std::string>();
        src = dir + "/train.de.gz";
        tgt = dir + "/train.en.gz";
        if (!fs::exists(src) || !fs::exists(tgt)) throw std::runtime_error("'" + src + "' not found: run tools/get_data.sh first");
      }
      if (spm.empty()) {
        VocabTrainingOptions vocab;
        vocab.inputs = {src, tgt};
        vocab.model_prefix = (work / "deen").string();
        vocab.vocab_size = r["vocab-size"].as<int>();
        const auto start = std::chrono::steady_clock::now();
        train_bpe_vocab(vocab);
        std::cout << "train joint BPE vocabulary (" << vocab.vocab_size << " pieces): " << seconds_since(start) << " s\n";
        spm = vocab.model_prefix + ".model";
      }
      const Tokenizer tok = Tokenizer::load(spm);
      PreprocessOptions preprocess;
      preprocess.corpus.max_sentence_tokens = r["max-sentence-tokens"].as<int64_t>();
      dataset_dir = (work / "dataset").string();
      const auto start = std::chrono::steady_clock::now();
      const DatasetManifest m = preprocess_corpus(src, tgt, tok, dataset_dir, preprocess);
      const double s = seconds_since(start);
      uint64_t bytes = 0;
      for (const auto& f : m.files) bytes += f.bytes;
      std::cout << "preprocess " << with_thousands(m.stats.total) << " pairs: " << s << " s, "
                << std::setprecision(0) << static_cast<double>(m.stats.total) / s << " pairs/s; "
                << std::setprecision(1) << static_cast<double>(bytes) / 1e6 << " MB, " << std::setprecision(2)
                << static_cast<double>(bytes) / static_cast<double>(m.src_tokens + m.tgt_tokens)
                << " bytes per token on disk; " << m.stats.summary() << "\n";
    }
    auto start = std::chrono::steady_clock::now();
    auto dataset = BinaryDataset::open(dataset_dir);
    std::cout << std::setprecision(3) << "open " << dataset_dir << " (" << with_thousands(dataset->size())
              << " pairs, every checksum verified): " << seconds_since(start) << " s\n";
    for (int64_t window : parse_list(r["windows"].as<std::string>())) {
      BatcherOptions bo;
      bo.batch_tokens = batch_tokens;
      bo.window_pairs = window;
      start = std::chrono::steady_clock::now();
      TokenBatcher batcher(*dataset, bo);
      const double build_s = seconds_since(start);
      const int64_t n = std::min(r["batches"].as<int64_t>(), batcher.batches_per_epoch());
      int64_t target_tokens = 0;
      start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; ++i) target_tokens += batcher.next(torch::kCPU).tgt_tokens;
      const double next_s = seconds_since(start);
      const double rate = static_cast<double>(target_tokens) / next_s;
      std::cout << "window " << (window == 0 ? std::string("global") : with_thousands(window)) << ": "
                << batcher.windows_per_epoch() << " window(s)/epoch, " << with_thousands(batcher.batches_per_epoch())
                << " batches, padding " << std::setprecision(2) << 100.0 * batcher.padding_fraction()
                << "%, start-up " << std::setprecision(3) << build_s << " s; next(): " << with_thousands(n)
                << " batches, " << std::setprecision(0) << rate << " target tokens/s = " << std::setprecision(1)
                << rate / kH100BaseTokensPerSecond << "x the H100's base training rate (goal >= 20x)\n";
    }
    std::cout << "peak RSS " << std::setprecision(0) << peak_rss_mb() << " MB\n";
    if (r["dataset"].as<std::string>().empty()) remove_tree(work.string());
  } catch (const std::exception& e) {
    std::cerr << "bench_data: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
