#include "torchmt/decoding/greedy_stream.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

#include <torch/torch.h>

#include "../kernels/primitives.h"

namespace torchmt {

void GreedyStream::join(const at::Tensor& src, const std::vector<int64_t>& tags, const SearchOptions& options) {
  if (static_cast<int64_t>(tags.size()) != src.size(0))
    throw std::invalid_argument("greedy stream: " + std::to_string(tags.size()) + " tags for " +
                                std::to_string(src.size(0)) + " sources");
  if (src.size(0) == 0) return;
  if (rows_.empty()) {
    decoder_.start(src);  // also after the last row left: the decoder's state is stale
    eos_id_ = options.eos_id;
  } else {
    if (!decoder_.can_join()) throw std::logic_error("this decoder cannot add rows to a running batch");
    if (options.eos_id != eos_id_) throw std::invalid_argument("greedy stream: rows with different eos ids");
    decoder_.join(src);
  }
  const auto limits = max_lengths(src, options);
  for (size_t i = 0; i < tags.size(); ++i) {
    Row row{tags[i], limits[i], options.length_penalty, options.scores, 0, 0, Hypothesis{}};
    row.next = options.bos_id;
    if (!row.scores) row.hypothesis.log_prob = std::numeric_limits<double>::quiet_NaN();
    rows_.push_back(std::move(row));
  }
}

void GreedyStream::step() {
  if (rows_.empty()) return;
  const auto device = decoder_.device();
  std::vector<int64_t> last;
  last.reserve(rows_.size());
  for (const auto& row : rows_) last.push_back(row.next);
  const auto last_tokens = torch::tensor(last, torch::kLong).to(device);
  at::Tensor best_lp, best_tok, eos_lp;
  const bool scores = std::any_of(rows_.begin(), rows_.end(), [](const Row& row) { return row.scores; });
  if (scores) {
    auto lprobs = decoder_.step(last_tokens);                               // [N, V]
    std::tie(best_lp, best_tok) = kernels::row_top_k(lprobs, 1);                     // [N, 1]
    eos_lp = lprobs.select(1, eos_id_).to(torch::kCPU).contiguous();        // a strided view otherwise
    best_lp = best_lp.to(torch::kCPU);
  } else {
    best_tok = decoder_.greedy_tokens(last_tokens);  // [N]
  }
  best_tok = best_tok.to(torch::kCPU).contiguous();
  const auto* lp_ptr = scores ? best_lp.data_ptr<float>() : nullptr;
  const auto* tok_ptr = best_tok.data_ptr<int64_t>();
  const auto* eos_ptr = scores ? eos_lp.data_ptr<float>() : nullptr;

  std::vector<bool> keep(rows_.size(), false);
  for (size_t r = 0; r < rows_.size(); ++r) {
    Row& row = rows_[r];
    Hypothesis& h = row.hypothesis;
    const bool forced = ++row.steps >= row.limit;  // out of room: only eos
    const int64_t tok = forced ? eos_id_ : tok_ptr[r];
    if (scores) h.log_prob += forced ? eos_ptr[r] : lp_ptr[r];  // NaN stays NaN: a row without scores
    if (tok == eos_id_) {
      h.score = h.log_prob / length_penalty(static_cast<int64_t>(h.tokens.size()) + 1, row.length_penalty);
      finished_.emplace_back(row.tag, std::move(h));
    } else {
      h.tokens.push_back(tok);
      row.next = tok;
      keep[r] = true;
    }
  }
  // A finished row's place goes to the last row still running, the others stay where they
  // are: the decoder moves one row per finished row (DecoderCache::select, in place) instead
  // of every row after it. No select after the last row: the next join starts afresh.
  const auto kept = static_cast<size_t>(std::count(keep.begin(), keep.end(), true));
  if (kept == 0 || kept == rows_.size()) {
    if (kept == 0) rows_.clear();
    return;
  }
  std::vector<int64_t> index(kept);
  std::vector<Row> next;
  next.reserve(kept);
  for (size_t i = 0, last = rows_.size(); i < kept; ++i) {
    size_t from = i;
    if (!keep[i]) {
      do --last; while (!keep[last]);  // a running row past the kept ones (there are as many as holes)
      from = last;
    }
    index[i] = static_cast<int64_t>(from);
    next.push_back(std::move(rows_[from]));
  }
  decoder_.select(torch::tensor(index, torch::kLong).to(device));
  rows_ = std::move(next);
}

std::vector<std::pair<int64_t, Hypothesis>> GreedyStream::take_finished() {
  std::vector<std::pair<int64_t, Hypothesis>> out;
  out.swap(finished_);
  return out;
}

}  // namespace torchmt
