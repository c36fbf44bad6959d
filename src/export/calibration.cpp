#include "torchmt/export/calibration.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include <torch/torch.h>

#include "torchmt/decoding/search.h"
#include "torchmt/decoding/transformer_decoder.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/model/linear.h"

namespace torchmt {

CalibrationResult calibrate_activation_ranges(const LoadedCheckpoint& checkpoint,
                                              const std::vector<std::string>& sentences) {
  const ModelConfig& c = checkpoint.meta.model;
  Transformer model = checkpoint.model;
  const auto tokenizers = checkpoint_tokenizers(checkpoint.meta);
  CalibrationResult result;
  std::vector<std::vector<int64_t>> sources;
  for (const auto& line : sentences) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto ids = tokenizers.first.encode(line);
    if (static_cast<int64_t>(ids.size()) > c.max_positions - 1) ids.resize(static_cast<size_t>(c.max_positions - 1));
    ids.push_back(c.eos_id);
    result.source_tokens += static_cast<int64_t>(ids.size());
    sources.push_back(std::move(ids));
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
  SearchOptions options;  // greedy, with scores: the whole output projection runs
  options.bos_id = c.bos_id;
  options.eos_id = c.eos_id;
  options.pad_id = c.pad_id;
  options.max_len_cap = std::min(options.max_len_cap, c.max_positions);
  TransformerDecoder decoder(model);
  constexpr size_t kBatch = 32;
  for (size_t begin = 0; begin < sources.size(); begin += kBatch) {
    const size_t end = std::min(sources.size(), begin + kBatch);
    size_t longest = 0;
    for (size_t i = begin; i < end; ++i) longest = std::max(longest, sources[i].size());
    auto src = torch::full({static_cast<int64_t>(end - begin), static_cast<int64_t>(longest)}, c.pad_id, torch::kLong);
    for (size_t i = begin; i < end; ++i)
      src[static_cast<int64_t>(i - begin)].narrow(0, 0, static_cast<int64_t>(sources[i].size()))
          .copy_(torch::tensor(sources[i], torch::kLong));
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
