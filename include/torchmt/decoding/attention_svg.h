#pragma once
// An SVG heatmap of attention weights (target pieces down, source pieces across): the
// picture the reference documents draw with seaborn, readable in any browser.
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

// weights [T, S] (rows sum to 1); labels give one piece per row / column.
std::string render_attention_svg(const at::Tensor& weights, const std::vector<std::string>& target_pieces,
                                 const std::vector<std::string>& source_pieces, const std::string& title);

}  // namespace torchmt
