#include "torchmt/decoding/forced_decoding.h"

#include <algorithm>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/data/tokenizer.h"

namespace torchmt {

std::vector<std::vector<float>> force_decode(IncrementalDecoder& decoder, const at::Tensor& src,
                                             const std::vector<const std::vector<int64_t>*>& targets, int64_t bos_id,
                                             int64_t eos_id, const std::vector<std::vector<int64_t>>& vocabularies) {
  if (src.size(0) != static_cast<int64_t>(targets.size()))
    throw std::invalid_argument("force_decode: " + std::to_string(src.size(0)) + " sources for " +
                                std::to_string(targets.size()) + " targets");
  if (!vocabularies.empty() && vocabularies.size() != targets.size())
    throw std::invalid_argument("force_decode: " + std::to_string(vocabularies.size()) + " vocabularies for " +
                                std::to_string(targets.size()) + " targets");
  std::vector<std::vector<float>> out(targets.size());
  if (targets.empty()) return out;
  decoder.start(src);
  if (std::any_of(vocabularies.begin(), vocabularies.end(), [](const auto& v) { return !v.empty(); })) {
    std::vector<const std::vector<int64_t>*> lists;
    for (const auto& v : vocabularies) lists.push_back(&v);
    decoder.restrict_output(lists);
  }
  std::vector<size_t> live(targets.size());  // decoder row -> target
  for (size_t r = 0; r < live.size(); ++r) {
    live[r] = r;
    out[r].reserve(targets[r]->size() + 1);
  }
  auto last = torch::full({static_cast<int64_t>(live.size())}, bos_id,
                          torch::TensorOptions().dtype(torch::kLong).device(decoder.device()));  // [N]
  for (size_t step = 0; !live.empty(); ++step) {
    std::vector<int64_t> want(live.size());
    for (size_t i = 0; i < live.size(); ++i) {
      const auto& t = *targets[live[i]];
      want[i] = step < t.size() ? t[step] : eos_id;
    }
    // Each row's token as one of the step's extra columns: the values beam search reads.
    std::vector<int64_t> tokens = want;
    std::sort(tokens.begin(), tokens.end());
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
    const OutputColumns columns(decoder.output_columns());
    std::vector<int64_t> extra;
    extra.reserve(tokens.size());
    for (int64_t token : tokens) {
      const int64_t column = columns.column(token);
      if (column < 0) throw std::invalid_argument("force_decode: token " + std::to_string(token) + " is not in the model's output");
      extra.push_back(column);
    }
    const auto top = decoder.step_top_k(last, 1, extra);
    const auto values = top.extra.to(torch::kFloat).contiguous();  // [N, E]
    const float* v = values.data_ptr<float>();
    const auto width = static_cast<size_t>(values.size(1));
    std::vector<int64_t> keep;
    for (size_t i = 0; i < live.size(); ++i) {
      const auto at = static_cast<size_t>(std::lower_bound(tokens.begin(), tokens.end(), want[i]) - tokens.begin());
      out[live[i]].push_back(v[i * width + at]);
      if (step < targets[live[i]]->size()) keep.push_back(static_cast<int64_t>(i));  // its eos still to come
    }
    if (keep.empty()) break;
    if (keep.size() < live.size()) {
      const auto index = torch::tensor(keep, torch::kLong).to(decoder.device());  // [N']
      decoder.select(index);
      std::vector<size_t> still;
      std::vector<int64_t> next;
      for (int64_t i : keep) {
        still.push_back(live[static_cast<size_t>(i)]);
        next.push_back(want[static_cast<size_t>(i)]);
      }
      live = std::move(still);
      want = std::move(next);
    }
    last = torch::tensor(want, torch::kLong).to(decoder.device());  // [N]
  }
  return out;
}

double sum_log_probs(const std::vector<float>& log_probs) {
  float sum = 0.0f;  // beam search's running score is a float
  for (float lp : log_probs) sum += lp;
  return sum;
}

std::vector<WordScore> word_scores(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                                   const std::vector<float>& log_probs) {
  if (log_probs.size() < tokens.size())
    throw std::invalid_argument("word_scores: " + std::to_string(log_probs.size()) + " log-probabilities for " +
                                std::to_string(tokens.size()) + " tokens");
  static const std::string kWordStart = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  std::vector<WordScore> words;
  std::vector<int64_t> ids;
  auto close = [&] {
    if (ids.empty()) return;
    WordScore& w = words.back();
    w.word = tokenizer.decode(ids);
    w.mean_log_prob = w.log_prob / static_cast<double>(w.pieces);
    ids.clear();
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string piece = tokenizer.id_to_piece(tokens[i]);
    if (words.empty() || piece.rfind(kWordStart, 0) == 0) {
      close();
      words.emplace_back();
      words.back().min_log_prob = log_probs[i];
    }
    words.back().min_log_prob = std::min<double>(words.back().min_log_prob, log_probs[i]);
    ids.push_back(tokens[i]);
    words.back().log_prob += log_probs[i];
    ++words.back().pieces;
  }
  close();
  return words;
}

}  // namespace torchmt
