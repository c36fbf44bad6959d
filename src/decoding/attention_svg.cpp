#include "torchmt/decoding/attention_svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/decoding/translator.h"

namespace torchmt {
namespace {

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// Sequential yellow-green-blue ramp (seaborn's "YlGnBu") from 0 to 1.
std::string colour(double v) {
  static const double stops[][3] = {{255, 255, 217}, {199, 233, 180}, {65, 182, 196}, {34, 94, 168}, {8, 29, 88}};
  v = std::clamp(v, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(v));
  const double f = v - i;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", static_cast<int>(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return buf;
}

}  // namespace

std::string render_attention_svg(const at::Tensor& weights, const std::vector<std::string>& target_pieces,
                                 const std::vector<std::string>& source_pieces, const std::string& title) {
  auto w = weights.to(torch::kCPU, torch::kFloat).contiguous();
  const int64_t rows = w.size(0), cols = w.size(1);
  if (static_cast<int64_t>(target_pieces.size()) != rows || static_cast<int64_t>(source_pieces.size()) != cols)
    throw std::invalid_argument("attention picture: labels do not match the weight matrix");
  const int cell = 28, left = 140, top = 150;
  const double peak = std::max(1e-9f, w.max().item<float>());
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << left + cell * cols + 100 << "' height='"
    << top + cell * rows + 40 << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='10' y='20' font-size='14'>" << escape_xml(title) << "</text>\n";
  auto acc = w.accessor<float, 2>();
  for (int64_t t = 0; t < rows; ++t) {
    o << "<text x='" << left - 6 << "' y='" << top + cell * t + cell / 2 + 4 << "' text-anchor='end'>"
      << escape_xml(target_pieces[t]) << "</text>\n";
    for (int64_t s = 0; s < cols; ++s) {
      o << "<rect x='" << left + cell * s << "' y='" << top + cell * t << "' width='" << cell << "' height='" << cell
        << "' fill='" << colour(acc[t][s] / peak) << "'><title>" << escape_xml(target_pieces[t]) << " -> "
        << escape_xml(source_pieces[s]) << ": " << acc[t][s] << "</title></rect>\n";
    }
  }
  for (int64_t s = 0; s < cols; ++s) {
    const int x = left + cell * s + cell / 2 + 4;
    o << "<text x='" << x << "' y='" << top - 6 << "' transform='rotate(-60 " << x << " " << top - 6 << ")'>"
      << escape_xml(source_pieces[s]) << "</text>\n";
  }
  // Colour bar.
  const int bar_x = left + cell * cols + 30;
  for (int i = 0; i < 10; ++i)
    o << "<rect x='" << bar_x << "' y='" << top + i * cell * rows / 10 << "' width='16' height='" << cell * rows / 10 + 1
      << "' fill='" << colour(1.0 - i / 9.0) << "'/>\n";
  char peak_text[32];
  std::snprintf(peak_text, sizeof(peak_text), "%.2f", peak);
  o << "<text x='" << bar_x + 20 << "' y='" << top + 10 << "'>" << peak_text << "</text>\n"
    << "<text x='" << bar_x + 20 << "' y='" << top + cell * rows << "'>0</text>\n</svg>\n";
  return o.str();
}

AttentionMap cross_attention_map(Translator& translator, const std::string& source,
                                 const std::vector<int64_t>& target_ids, int64_t layer, int64_t head) {
  AttentionMap map;
  map.weights = translator.cross_attention(source, target_ids, layer, head);  // [T, S]
  for (auto id : target_ids) map.target_pieces.push_back(translator.tgt_tokenizer().id_to_piece(id));
  map.target_pieces.push_back("</s>");
  for (auto id : translator.encode_source(source)) map.source_pieces.push_back(translator.src_tokenizer().id_to_piece(id));
  // Row t of the weights is the decoder input at t (bos + prefix), predicting target t.
  map.title = "cross-attention, decoder layer " + (layer < 0 ? std::string("last") : std::to_string(layer)) + ", " +
              (head < 0 ? std::string("mean of heads") : "head " + std::to_string(head));
  return map;
}

std::string render_attention_svg(const AttentionMap& map) {
  return render_attention_svg(map.weights, map.target_pieces, map.source_pieces, map.title);
}

}  // namespace torchmt
