#include "torchmt/decoding/translator.h"

#include <algorithm>
#include <numeric>

#include <torch/torch.h>

#include "torchmt/data/special_ids.h"
#include "torchmt/decoding/transformer_decoder.h"
#include "torchmt/model/masks.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/util/device.h"

namespace torchmt {

Translator::Translator(Transformer model, Tokenizer src_tokenizer, Tokenizer tgt_tokenizer, c10::Device device,
                       c10::ScalarType dtype)
    : model_(std::move(model)),
      config_(model_->config()),
      src_tok_(std::move(src_tokenizer)),
      tgt_tok_(std::move(tgt_tokenizer)),
      device_(device),
      dtype_(dtype) {
  make_decoder_ = [model = model_](bool use_cache) mutable -> std::unique_ptr<IncrementalDecoder> {
    model->eval();
    return std::make_unique<TransformerDecoder>(model, use_cache);
  };
}

Translator::Translator(DecoderFactory make_decoder, ModelConfig config, Tokenizer src_tokenizer,
                       Tokenizer tgt_tokenizer, c10::Device device, c10::ScalarType dtype)
    : make_decoder_(std::move(make_decoder)),
      config_(std::move(config)),
      src_tok_(std::move(src_tokenizer)),
      tgt_tok_(std::move(tgt_tokenizer)),
      device_(device),
      dtype_(dtype) {}

Translator Translator::from_checkpoint(const std::string& path, const c10::Device& device, c10::ScalarType dtype) {
  auto loaded = load_checkpoint(path, device);
  if (loaded.meta.src_spm_model.empty())
    throw std::runtime_error("checkpoint " + path + " carries no SentencePiece model");
  Tokenizer src = Tokenizer::from_serialized(loaded.meta.src_spm_model);
  Tokenizer tgt = loaded.meta.tgt_spm_model.empty() || loaded.meta.tgt_spm_model == loaded.meta.src_spm_model
                      ? src
                      : Tokenizer::from_serialized(loaded.meta.tgt_spm_model);
  return Translator(loaded.model, src, tgt, device, dtype);
}

std::vector<int64_t> Translator::encode_source(const std::string& line, bool* truncated) const {
  auto ids = src_tok_.encode(line);
  const auto limit = static_cast<size_t>(config_.max_positions - 1);
  const bool cut = ids.size() > limit;
  if (cut) ids.resize(limit);
  if (truncated) *truncated = cut;
  ids.push_back(kEosId);
  return ids;
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& lines,
                                               const TranslationOptions& options) {
  std::vector<Translation> out(lines.size());
  std::vector<std::vector<int64_t>> sources(lines.size());
  std::vector<size_t> order;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t\r") == std::string::npos) continue;  // empty in, empty out
    sources[i] = encode_source(lines[i], &out[i].truncated);
    order.push_back(i);
  }
  // Longest first: similar lengths share a batch, and memory peaks early.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });

  SearchOptions search = options.search;
  search.bos_id = kBosId;
  search.eos_id = kEosId;
  search.pad_id = kPadId;
  search.max_len_cap = std::min(search.max_len_cap, config_.max_positions);
  auto decoder = make_decoder_(options.use_cache);
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device_, dtype_);

  size_t begin = 0;
  while (begin < order.size()) {
    const int64_t longest = static_cast<int64_t>(sources[order[begin]].size());
    size_t end = begin;
    while (end < order.size()) {
      const auto rows = static_cast<int64_t>(end - begin + 1);
      if (options.batch_source_tokens > 0 ? rows * longest > options.batch_source_tokens && end > begin
                                 : rows > std::max<int64_t>(1, options.batch_size))
        break;
      ++end;
    }
    auto src = torch::full({static_cast<int64_t>(end - begin), longest}, kPadId, torch::kLong);  // [B, S]
    auto acc = src.accessor<int64_t, 2>();
    for (size_t r = begin; r < end; ++r) {
      const auto& ids = sources[order[r]];
      for (size_t j = 0; j < ids.size(); ++j) acc[static_cast<int64_t>(r - begin)][static_cast<int64_t>(j)] = ids[j];
    }
    auto result = torchmt::search(*decoder, src.to(device_), search);
    for (size_t r = begin; r < end; ++r) {
      Translation& t = out[order[r]];
      t.hypotheses = std::move(result[r - begin]);
      for (const auto& h : t.hypotheses) t.texts.push_back(tgt_tok_.decode(h.tokens));
    }
    begin = end;
  }
  for (auto& t : out)
    if (t.texts.empty()) t.texts.emplace_back();
  return out;
}

std::vector<std::string> Translator::translate_text(const std::vector<std::string>& lines,
                                                    const TranslationOptions& options) {
  auto translations = translate(lines, options);
  std::vector<std::string> out;
  out.reserve(translations.size());
  for (auto& t : translations) out.push_back(std::move(t.texts.front()));
  return out;
}

at::Tensor Translator::cross_attention(const std::string& source, const std::vector<int64_t>& target_ids,
                                       int64_t layer, int64_t head) {
  if (!model_) throw std::runtime_error("cross-attention weights need a checkpoint (not available for this model format)");
  torch::NoGradGuard no_grad;
  model_->eval();
  auto src_ids = encode_source(source);
  auto src = torch::tensor(src_ids, torch::kLong).unsqueeze(0).to(device_);  // [1, S]
  std::vector<int64_t> tgt_ids{kBosId};
  tgt_ids.insert(tgt_ids.end(), target_ids.begin(), target_ids.end());
  auto tgt = torch::tensor(tgt_ids, torch::kLong).unsqueeze(0).to(device_);  // [1, T], row t predicts token t
  auto src_mask = make_padding_mask(src, kPadId);
  auto memory = model_->encode(src, src_mask);
  std::vector<at::Tensor> weights;
  model_->decode(tgt, memory, src_mask, make_target_mask(tgt, kPadId), &weights);
  const auto n_layers = static_cast<int64_t>(weights.size());
  const int64_t index = layer < 0 ? n_layers + layer : layer;
  if (index < 0 || index >= n_layers)
    throw std::invalid_argument("attention layer " + std::to_string(layer) + " out of range (model has " +
                                std::to_string(n_layers) + " decoder layers)");
  auto w = weights[static_cast<size_t>(index)][0];  // [H, T, S]
  if (head >= w.size(0))
    throw std::invalid_argument("attention head " + std::to_string(head) + " out of range (" +
                                std::to_string(w.size(0)) + " heads)");
  return (head >= 0 ? w[head] : w.mean(0)).to(torch::kFloat).cpu();  // [T, S]
}

}  // namespace torchmt
