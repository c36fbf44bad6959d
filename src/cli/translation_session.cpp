#include "translation_session.h"

#include <iostream>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/data/text_file.h"
#include "torchmt/util/utf8.h"
#include "torchmt/evaluation/utf8_line_reader.h"
#include "torchmt/export/exported_model.h"
#include "torchmt/util/device.h"

namespace torchmt::cli {

void add_translation_flags(cxxopts::Options& options) {
  options.add_options("decoding")("m,model", "checkpoint (.pt) or TorchScript export (.ts)", cxxopts::value<std::string>())(
      "beam", "beam size (default: greedy)", cxxopts::value<int64_t>()->default_value("1"))(
      "greedy", "greedy search (the default)")("lenpen", "GNMT length penalty alpha",
                                              cxxopts::value<double>()->default_value("0.6"))(
      "max-len-a", "max target length = a * source length + b", cxxopts::value<double>()->default_value("1.2"))(
      "max-len-b", "see --max-len-a", cxxopts::value<int64_t>()->default_value("10"))(
      "batch-size", "sentences per batch", cxxopts::value<int64_t>()->default_value("64"))(
      "max-tokens", "source tokens per batch (overrides --batch-size)", cxxopts::value<int64_t>()->default_value("0"))(
      "nbest", "hypotheses per input line", cxxopts::value<int64_t>()->default_value("1"))(
      "device", "auto|cpu|cuda|cuda:N", cxxopts::value<std::string>()->default_value("auto"))(
      "dtype", "auto|fp32|bf16", cxxopts::value<std::string>()->default_value("auto"))(
      "threads", "CPU threads, 0 = all cores", cxxopts::value<int64_t>()->default_value("0"))(
      "no-cache", "recompute the whole prefix at every step (slow; for comparison)");
}

TranslationSession::TranslationSession(const cxxopts::ParseResult& r) {
  if (!r.count("model")) throw std::invalid_argument("missing required option -m/--model");
  if (r.count("greedy") && r["beam"].as<int64_t>() != 1) throw std::invalid_argument("--greedy and --beam N conflict");
  SearchOptions& s = options_.search;
  s.beam_size = r["beam"].as<int64_t>();
  s.length_penalty = r["lenpen"].as<double>();
  s.max_len_a = r["max-len-a"].as<double>();
  s.max_len_b = r["max-len-b"].as<int64_t>();
  s.nbest = r["nbest"].as<int64_t>();
  options_.batch_size = r["batch-size"].as<int64_t>();
  options_.max_tokens = r["max-tokens"].as<int64_t>();
  options_.use_cache = r.count("no-cache") == 0;
  if (s.beam_size < 1) throw std::invalid_argument("--beam must be at least 1");
  if (s.nbest < 1 || s.nbest > s.beam_size) throw std::invalid_argument("--nbest must be between 1 and --beam");
  if (options_.batch_size < 1 || options_.max_tokens < 0) throw std::invalid_argument("invalid --batch-size/--max-tokens");
  if (s.max_len_a < 0 || s.max_len_b < 0) throw std::invalid_argument("--max-len-a/-b must not be negative");
  if (r["threads"].as<int64_t>() > 0) torch::set_num_threads(static_cast<int>(r["threads"].as<int64_t>()));

  const std::string path = r["model"].as<std::string>();
  const c10::Device device = resolve_device(r["device"].as<std::string>());
  if (!options_.use_cache && is_torchscript_export(path))
    throw std::invalid_argument("--no-cache is not available for TorchScript exports");
  translator_ = std::make_unique<Translator>(
      load_translator(path, device, resolve_dtype(r["dtype"].as<std::string>(), device)));
}

TranslationSession::~TranslationSession() = default;

std::vector<Translation> TranslationSession::translate(const std::vector<std::string>& lines) {
  return translator_->translate(lines, options_);
}

std::vector<std::string> read_input_lines(const std::string& path) {
  if (path != "-") return evaluation::read_utf8_lines(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!is_valid_utf8(line))
      throw std::runtime_error("standard input line " + std::to_string(lines.size() + 1) + ": invalid UTF-8");
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace torchmt::cli
