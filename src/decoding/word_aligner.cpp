#include "torchmt/decoding/word_aligner.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/decoding/translator.h"

namespace torchmt {

namespace {

// Each pair's cross-attention rows, batched: visit(line, rows, source ids, target ids) with rows
// [T, S] (target piece t's row: where it is predicted, or its input with options.shift; columns:
// the source pieces and eos) for every pair with pieces on both sides.
void visit_pair_attention(
    Translator& translator, const std::vector<std::string>& sources, const std::vector<std::vector<int64_t>>& targets,
    const AlignmentOptions& options, int64_t batch_size,
    const std::function<void(size_t, const at::Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&)>& visit) {
  if (sources.size() != targets.size())
    throw std::invalid_argument("alignments: " + std::to_string(sources.size()) + " sources for " +
                                std::to_string(targets.size()) + " targets");
  std::vector<size_t> rows;  // the pairs with pieces on both sides
  std::vector<std::vector<int64_t>> source_ids(sources.size()), target_ids(sources.size());
  // A forced target longer than the model's positions is read up to them (a search never makes one).
  const auto max_target = static_cast<size_t>(std::max<int64_t>(1, translator.config().max_positions - 1));
  for (size_t i = 0; i < sources.size(); ++i) {
    if (Translator::is_blank(sources[i]) || targets[i].empty()) continue;
    source_ids[i] = translator.encode_source(sources[i]);
    target_ids[i].assign(targets[i].begin(), targets[i].begin() + static_cast<std::ptrdiff_t>(std::min(max_target, targets[i].size())));
    rows.push_back(i);
  }
  const auto step = static_cast<size_t>(std::max<int64_t>(1, batch_size));
  for (size_t begin = 0; begin < rows.size(); begin += step) {
    const size_t end = std::min(rows.size(), begin + step);
    std::vector<const std::vector<int64_t>*> src, tgt;
    for (size_t r = begin; r < end; ++r) {
      src.push_back(&source_ids[rows[r]]);
      tgt.push_back(&target_ids[rows[r]]);
    }
    const auto weights = translator.cross_attention_weights(src, tgt);
    const auto n_layers = static_cast<int64_t>(weights.size());
    const int64_t layer = options.layer < 0 ? n_layers + options.layer : options.layer;
    if (layer < 0 || layer >= n_layers)
      throw std::invalid_argument("alignment layer " + std::to_string(options.layer) + " out of range (model has " +
                                  std::to_string(n_layers) + " decoder layers)");
    auto w = weights[static_cast<size_t>(layer)];  // [B, H, T + 1, S]
    if (options.head >= w.size(1))
      throw std::invalid_argument("alignment head " + std::to_string(options.head) + " out of range (" +
                                  std::to_string(w.size(1)) + " heads)");
    w = options.head >= 0 ? w.select(1, options.head) : w.mean(1);  // [B, T + 1, S]
    for (size_t r = begin; r < end; ++r) {
      const size_t line = rows[r];
      const auto& s_ids = source_ids[line];
      const auto& t_ids = target_ids[line];
      const auto pair_rows = w[static_cast<int64_t>(r - begin)]
                                 .narrow(0, options.shift ? 1 : 0, static_cast<int64_t>(t_ids.size()))
                                 .narrow(1, 0, static_cast<int64_t>(s_ids.size()));  // [T, S]
      visit(line, pair_rows, s_ids, t_ids);
    }
  }
}

}  // namespace

std::vector<WordAlignment> align_words(Translator& translator, const std::vector<std::string>& sources,
                                       const std::vector<std::vector<int64_t>>& targets,
                                       const AlignmentOptions& options, int64_t batch_size) {
  std::vector<WordAlignment> out(sources.size());
  const auto& src_tok = translator.src_tokenizer();
  const auto& tgt_tok = translator.tgt_tokenizer();
  visit_pair_attention(translator, sources, targets, options, batch_size,
                       [&](size_t line, const at::Tensor& rows, const std::vector<int64_t>& s_ids,
                           const std::vector<int64_t>& t_ids) {
    std::vector<std::string> s_pieces, t_pieces;
    for (size_t k = 0; k + 1 < s_ids.size(); ++k) s_pieces.push_back(src_tok.id_to_piece(s_ids[k]));  // no eos
    for (auto id : t_ids) t_pieces.push_back(tgt_tok.id_to_piece(id));
    if (s_pieces.empty()) return;
    const auto s_words = piece_words(s_pieces), t_words = piece_words(t_pieces);
    const auto n_src = static_cast<int32_t>(whitespace_words(sources[line]).size());
    const auto n_tgt = static_cast<int32_t>(whitespace_words(tgt_tok.decode(t_ids)).size());
    // [T, S'] columns of the source pieces without eos
    const auto best = rows.narrow(1, 0, static_cast<int64_t>(s_pieces.size())).argmax(1).contiguous();  // [T]
    const auto* b = best.data_ptr<int64_t>();
    auto& pairs = out[line];
    for (size_t t = 0; t < t_ids.size(); ++t) {
      const int32_t sw = std::min(s_words[static_cast<size_t>(b[t])], n_src - 1);
      const int32_t tw = std::min(t_words[t], n_tgt - 1);
      if (sw >= 0 && tw >= 0) pairs.emplace_back(sw, tw);
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  });
  return out;
}

std::vector<std::vector<std::vector<float>>> attention_vectors(Translator& translator,
                                                               const std::vector<std::string>& sources,
                                                               const std::vector<std::vector<int64_t>>& targets,
                                                               const AlignmentOptions& options, int64_t batch_size) {
  std::vector<std::vector<std::vector<float>>> out(sources.size());
  visit_pair_attention(translator, sources, targets, options, batch_size,
                       [&](size_t line, const at::Tensor& rows, const std::vector<int64_t>&, const std::vector<int64_t>&) {
    const auto host = rows.to(torch::kFloat).contiguous();  // [T, S]
    const auto* p = host.data_ptr<float>();
    const int64_t columns = host.size(1);
    for (int64_t t = 0; t < host.size(0); ++t) out[line].emplace_back(p + t * columns, p + (t + 1) * columns);
  });
  return out;
}

}  // namespace torchmt
