#pragma once
// An SVG heatmap of attention weights (target pieces down, source pieces across): the
// picture the reference documents draw with seaborn, readable in any browser.
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

class Translator;

// The cross-attention of one sentence and its translation, labelled for a picture: what
// `translate --attention-svg` draws and what the server's page shows.
struct AttentionMap {
  at::Tensor weights;                      // [T, S] float on the CPU, rows sum to 1
  std::vector<std::string> target_pieces;  // one per row: the translation's pieces, then </s>
  std::vector<std::string> source_pieces;  // one per column: the source as the model sees it
  std::string title;
};

// `layer` -1 = last, `head` -1 = mean over heads; std::invalid_argument when out of range,
// std::runtime_error for a model without weights to read (see Translator::cross_attention).
AttentionMap cross_attention_map(Translator& translator, const std::string& source,
                                 const std::vector<int64_t>& target_ids, int64_t layer, int64_t head);

// weights [T, S] (rows sum to 1); labels give one piece per row / column.
std::string render_attention_svg(const at::Tensor& weights, const std::vector<std::string>& target_pieces,
                                 const std::vector<std::string>& source_pieces, const std::string& title);

std::string render_attention_svg(const AttentionMap& map);

}  // namespace torchmt
