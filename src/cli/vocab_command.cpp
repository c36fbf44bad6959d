// torchmt vocab: trains the SentencePiece BPE model(s) a translation model is built on.
#include <chrono>
#include <iomanip>
#include <iostream>

#include "cli_options.h"
#include "torchmt/data/tokenizer.h"

namespace torchmt::cli {

namespace {

void train_one(VocabTrainingOptions options) {
  const auto start = std::chrono::steady_clock::now();
  train_bpe_vocab(options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Tokenizer tok = Tokenizer::load(options.model_prefix + ".model");
  std::cout << "wrote " << options.model_prefix << ".model and " << options.model_prefix << ".vocab ("
            << tok.vocab_size() << " pieces, checksum " << tok.checksum() << ", " << std::fixed
            << std::setprecision(1) << seconds << " s)\n";
}

int run_vocab(int argc, char** argv) {
  cxxopts::Options options(argv[0],
                           "Train a SentencePiece BPE vocabulary (pad 0, unk 1, bos 2, eos 3) on parallel text.\n"
                           "Joint by default (PREFIX.model, PREFIX.vocab), so embeddings can be shared;\n"
                           "--separate trains PREFIX.src.model and PREFIX.tgt.model.");
  options.add_options()("src", "source-side training text (plain or .gz)", cxxopts::value<std::string>())(
      "tgt", "target-side training text (plain or .gz)", cxxopts::value<std::string>())(
      "vocab-size", "pieces per model", cxxopts::value<int>()->default_value("8000"))(
      "out", "output prefix, e.g. spm/deen", cxxopts::value<std::string>())(
      "separate", "one model per language instead of a joint one")(
      "input-sentence-size", "sentences sampled for training (bounds memory on large corpora)",
      cxxopts::value<int64_t>()->default_value("2000000"))(
      "seed", "sampling seed (same seed and input -> same model)", cxxopts::value<uint32_t>()->default_value("1"))(
      "character-coverage", "share of characters covered by pieces", cxxopts::value<double>()->default_value("1.0"));
  int code = kExitOk;
  auto r = parse_flags(options, argc, argv, code);
  if (!r) return code;
  for (const char* name : {"src", "tgt", "out"}) {
    if (!require_flag(*r, name, argv[0])) return kExitUsage;
  }
  VocabTrainingOptions base;
  base.vocab_size = (*r)["vocab-size"].as<int>();
  base.input_sentence_size = (*r)["input-sentence-size"].as<int64_t>();
  base.seed = (*r)["seed"].as<uint32_t>();
  base.character_coverage = (*r)["character-coverage"].as<double>();
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
  const std::string src = (*r)["src"].as<std::string>();
  const std::string tgt = (*r)["tgt"].as<std::string>();
  const std::string out = (*r)["out"].as<std::string>();
  if (r->count("separate")) {
    VocabTrainingOptions s = base, t = base;
    s.inputs = {src};
    s.model_prefix = out + ".src";
    t.inputs = {tgt};
    t.model_prefix = out + ".tgt";
    train_one(s);
    train_one(t);
  } else {
    base.inputs = {src, tgt};
    base.model_prefix = out;
    train_one(base);
  }
  return kExitOk;
}

const CommandRegistration registration({"vocab", "train a SentencePiece BPE vocabulary on parallel text", run_vocab,
                                        10});

}  // namespace
}  // namespace torchmt::cli
