#include "export/calibration.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include <torch/torch.h>

#include "torchmt/decoding/search.h"
#include "decoding/transformer_decoder.h"
#include "torchmt/decoding/translator.h"
#include "io/checkpoint.h"
#include "model/linear.h"

namespace torchmt {

CalibrationResult calibrate_activation_ranges(const LoadedCheckpoint& checkpoint,
                                              const std::vector<std::string>& sentences) {
  Transformer model = checkpoint.model;
  const auto tokenizers = checkpoint_tokenizers(checkpoint.meta);
  // Sources as translate encodes and batches them (truncation, eos, padding).
  const Translator translator(model, tokenizers.first, tokenizers.second, c10::Device(c10::kCPU), torch::kFloat);
  CalibrationResult result;
  std::vector<std::vector<int64_t>> sources;
  for (const auto& line : sentences) {
    if (Translator::is_blank(line)) continue;
    sources.push_back(translator.encode_source(line));
    result.source_tokens += static_cast<int64_t>(sources.back().size());
  }
  if (sources.empty()) throw std::invalid_argument("calibration: no sentences (the file holds only blank lines)");
  result.sentences = static_cast<int64_t>(sources.size());

  torch::NoGradGuard no_grad;
  model->eval();
  release_inference_preparation(*model);  // the float layers: every input passes apply_linear
  std::unordered_map<const torch::nn::LinearImpl*, ActivationRange> seen;
  ObserveLinearInputs observer([&](const torch::nn::LinearImpl& layer, const torch::Tensor& x) {
    if (x.numel() == 0) return;
    auto [it, fresh] = seen.try_emplace(&layer, ActivationRange{0.f, false});
    const auto [low, high] = x.detach().aminmax();
    it->second.amax = std::max({it->second.amax, -low.item<float>(), high.item<float>()});
    it->second.has_negative = it->second.has_negative || low.item<float>() < 0.f;
  });
  // Greedy, with scores (the default): the whole output projection runs.
  const SearchOptions options = translator.search_options(TranslationOptions{});
  TransformerDecoder decoder(model);
  constexpr size_t kBatch = 32;
  for (size_t begin = 0; begin < sources.size(); begin += kBatch) {
    const size_t end = std::min(sources.size(), begin + kBatch);
    std::vector<const std::vector<int64_t>*> rows;
    for (size_t i = begin; i < end; ++i) rows.push_back(&sources[i]);
    const auto src = translator.source_batch(rows);  // [n, S]
    for (const auto& hyps : search(decoder, src, options))
      result.target_tokens += static_cast<int64_t>(hyps.front().tokens.size()) + 1;
  }
  for (const auto& item : model->named_modules()) {  // keyed by the layer's own name (a tied weight has several)
    const auto it = seen.find(dynamic_cast<const torch::nn::LinearImpl*>(item.value().get()));
    if (it == seen.end() || it->second.amax <= 0.f) continue;  // never run (an expert never chosen), or all zeros
    result.ranges.emplace(item.key() + ".weight", it->second);
  }
  return result;
}

}  // namespace torchmt
