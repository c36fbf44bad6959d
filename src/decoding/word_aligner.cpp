#include "torchmt/decoding/word_aligner.h"

#include <algorithm>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/decoding/translator.h"

namespace torchmt {

std::vector<WordAlignment> align_words(Translator& translator, const std::vector<std::string>& sources,
                                       const std::vector<std::vector<int64_t>>& targets,
                                       const AlignmentOptions& options, int64_t batch_size) {
  if (sources.size() != targets.size())
    throw std::invalid_argument("alignments: " + std::to_string(sources.size()) + " sources for " +
                                std::to_string(targets.size()) + " targets");
  std::vector<WordAlignment> out(sources.size());
  std::vector<size_t> rows;  // the pairs with words on both sides
  std::vector<std::vector<int64_t>> source_ids(sources.size()), target_ids(sources.size());
  // A forced target longer than the model's positions is read up to them (a search never makes one).
  const auto max_target = static_cast<size_t>(std::max<int64_t>(1, translator.config().max_positions - 1));
  for (size_t i = 0; i < sources.size(); ++i) {
    if (Translator::is_blank(sources[i]) || targets[i].empty()) continue;
    source_ids[i] = translator.encode_source(sources[i]);
    target_ids[i].assign(targets[i].begin(), targets[i].begin() + static_cast<std::ptrdiff_t>(std::min(max_target, targets[i].size())));
    rows.push_back(i);
  }
  const auto& src_tok = translator.src_tokenizer();
  const auto& tgt_tok = translator.tgt_tokenizer();
  for (size_t begin = 0; begin < rows.size(); begin += static_cast<size_t>(std::max<int64_t>(1, batch_size))) {
    const size_t end = std::min(rows.size(), begin + static_cast<size_t>(std::max<int64_t>(1, batch_size)));
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
      std::vector<std::string> s_pieces, t_pieces;
      for (size_t k = 0; k + 1 < s_ids.size(); ++k) s_pieces.push_back(src_tok.id_to_piece(s_ids[k]));  // no eos
      for (auto id : t_ids) t_pieces.push_back(tgt_tok.id_to_piece(id));
      if (s_pieces.empty()) continue;
      const auto s_words = piece_words(s_pieces), t_words = piece_words(t_pieces);
      const auto n_src = static_cast<int32_t>(whitespace_words(sources[line]).size());
      const auto n_tgt = static_cast<int32_t>(whitespace_words(tgt_tok.decode(t_ids)).size());
      const auto shift = options.shift ? 1 : 0;
      // [T, S'] rows of the target pieces, columns of the source pieces without eos
      const auto rows_of_pair = w[static_cast<int64_t>(r - begin)]
                                    .narrow(0, shift, static_cast<int64_t>(t_ids.size()))
                                    .narrow(1, 0, static_cast<int64_t>(s_pieces.size()));
      const auto best = rows_of_pair.argmax(1).contiguous();  // [T]
      const auto* b = best.data_ptr<int64_t>();
      auto& pairs = out[line];
      for (size_t t = 0; t < t_ids.size(); ++t) {
        const int32_t sw = std::min(s_words[static_cast<size_t>(b[t])], n_src - 1);
        const int32_t tw = std::min(t_words[t], n_tgt - 1);
        if (sw >= 0 && tw >= 0) pairs.emplace_back(sw, tw);
      }
      std::sort(pairs.begin(), pairs.end());
      pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    }
  }
  return out;
}

}  // namespace torchmt
