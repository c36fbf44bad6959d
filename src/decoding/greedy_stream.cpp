#include "decoding/greedy_stream.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include <torch/torch.h>

#include "../kernels/primitives.h"

namespace torchmt {

void GreedyStream::join(const at::Tensor& src, const std::vector<int64_t>& tags, const SearchOptions& options,
                        const Steering& steering) {
  if (static_cast<int64_t>(tags.size()) != src.size(0) || (!steering.empty() && steering.size() != tags.size()))
    throw std::invalid_argument("greedy stream: " + std::to_string(tags.size()) + " tags and " +
                                std::to_string(steering.size()) + " steerings for " + std::to_string(src.size(0)) +
                                " sources");
  if (has_constraints(steering))
    throw std::invalid_argument("greedy stream: constraints need beam search (search() runs it for them)");
  if (src.size(0) == 0) return;
  if (rows_.empty()) {
    decoder_.start(src);  // also after the last row left: the decoder's state is stale
    eos_id_ = options.eos_id;
  } else {
    if (!decoder_.can_join()) throw std::logic_error("this decoder cannot add rows to a running batch");
    if (options.eos_id != eos_id_) throw std::invalid_argument("greedy stream: rows with different eos ids");
    decoder_.join(src);
  }
  if (const auto lists = vocabularies_of(steering); !lists.empty()) decoder_.restrict_output(lists);
  const auto limits = max_lengths(src, options, steering);
  for (size_t i = 0; i < tags.size(); ++i) {
    Row row{tags[i], limits[i], options, {}, tags[i], 0, 0, Hypothesis{}};
    if (!steering.empty()) {
      row.prefix = steering[i].prefix;
      row.stream = steering[i].stream;
    }
    row.next = options.bos_id;
    if (!options.scores) row.hypothesis.log_prob = std::numeric_limits<double>::quiet_NaN();
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
  auto in_prefix = [](const Row& row) { return row.hypothesis.tokens.size() < row.prefix.size(); };
  at::Tensor best_lp, best_tok, eos_lp, lprobs;
  bool scores = false, all_rows = false;  // log-probabilities needed: the best and eos, or every one
  bool any_ruled = false;
  auto ruled = [&](const Row& row) {  // the token rules hold past the prefix, short of the limit
    return row.options.token_rules() && !in_prefix(row) && row.steps + 1 < row.limit;
  };
  for (const auto& row : rows_) {
    any_ruled = any_ruled || ruled(row);
    scores = scores || row.options.scores || row.options.sampling();
    all_rows = all_rows || row.options.sampling() || (row.options.scores && in_prefix(row));
  }
  scores = scores || any_ruled;
  all_rows = all_rows || any_ruled;
  int64_t vocab = 0;  // columns of the step's log-probabilities
  std::optional<OutputColumns> columns;
  int64_t eos_column = eos_id_;
  if (scores) {
    columns.emplace(decoder_.output_columns());
    eos_column = columns->column(eos_id_);
    if (eos_column < 0) throw std::logic_error("greedy search: the decoder's output has no eos column");
  }
  if (all_rows) {
    lprobs = decoder_.step(last_tokens).to(torch::kCPU).contiguous();  // [N, C]
    vocab = lprobs.size(1);
    if (any_ruled) {  // (sampling and prefixes come here too, without rules)
      std::vector<const std::vector<int64_t>*> outputs;
      std::vector<const SearchOptions*> rules;
      for (const auto& row : rows_) {
        outputs.push_back(&row.hypothesis.tokens);
        rules.push_back(ruled(row) ? &row.options : nullptr);
      }
      apply_token_rules(lprobs, *columns, outputs, rules);
    }
    best_tok = kernels::row_top_k(lprobs, 1).second;                    // [N, 1] columns
  } else if (scores) {
    auto step_lprobs = decoder_.step(last_tokens);                               // [N, C]
    std::tie(best_lp, best_tok) = kernels::row_top_k(step_lprobs, 1);            // [N, 1] columns
    eos_lp = step_lprobs.select(1, eos_column).to(torch::kCPU).contiguous();     // a strided view otherwise
    best_lp = best_lp.to(torch::kCPU);
  } else {
    best_tok = decoder_.greedy_tokens(last_tokens);  // [N] tokens
  }
  best_tok = best_tok.to(torch::kCPU).contiguous();
  const auto* lp_ptr = best_lp.defined() ? best_lp.data_ptr<float>() : nullptr;
  const auto* tok_ptr = best_tok.data_ptr<int64_t>();
  const auto* eos_ptr = eos_lp.defined() ? eos_lp.data_ptr<float>() : nullptr;
  const auto* all_ptr = lprobs.defined() ? lprobs.data_ptr<float>() : nullptr;
  auto token_of = [&](int64_t column) { return columns ? columns->token(column) : column; };

  std::vector<bool> keep(rows_.size(), false);
  for (size_t r = 0; r < rows_.size(); ++r) {
    Row& row = rows_[r];
    Hypothesis& h = row.hypothesis;
    const bool forced = ++row.steps >= row.limit;  // out of room: only eos
    const float* row_lp = all_ptr ? all_ptr + static_cast<int64_t>(r) * vocab : nullptr;
    int64_t tok = token_of(tok_ptr[r]);
    if (forced) tok = eos_id_;
    else if (in_prefix(row)) tok = row.prefix[h.tokens.size()];
    else if (row.options.sampling())
      tok = token_of(sample_token(row_lp, vocab, row.options,
                                  sampling_uniform(row.options.seed, row.stream, static_cast<int64_t>(h.tokens.size()))));
    if (row.options.scores) {
      float lp = 0.0f;
      if (row_lp) {
        const int64_t column = columns->column(tok);
        lp = column < 0 ? -std::numeric_limits<float>::infinity() : row_lp[column];
      } else {
        lp = forced ? eos_ptr[r] : lp_ptr[r];
      }
      h.log_prob += lp;
      h.token_log_probs.push_back(lp);
    }
    if (tok == eos_id_) {
      h.score = h.log_prob / length_penalty(static_cast<int64_t>(h.tokens.size()) + 1, row.options.length_penalty);
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

void GreedyStream::end_early(const std::function<bool(int64_t tag)>& which) {
  for (Row& row : rows_)
    if (which(row.tag)) row.limit = std::min(row.limit, row.steps + 1);
}

std::vector<std::pair<int64_t, Hypothesis>> GreedyStream::take_finished() {
  std::vector<std::pair<int64_t, Hypothesis>> out;
  out.swap(finished_);
  return out;
}

}  // namespace torchmt
