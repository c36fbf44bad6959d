#include "torchmt/decoding/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <stdexcept>

#include <torch/torch.h>

#include "decoding/greedy_stream.h"
#include "util/split_mix.h"
#include "../kernels/primitives.h"

namespace torchmt {

OutputColumns::OutputColumns(const at::Tensor& columns) {
  if (!columns.defined()) return;
  const auto host = columns.to(torch::kCPU).to(torch::kLong).contiguous();
  ids_.assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

int64_t OutputColumns::column(int64_t token) const {
  if (ids_.empty()) return token;
  const auto it = std::lower_bound(ids_.begin(), ids_.end(), token);
  return it == ids_.end() || *it != token ? -1 : static_cast<int64_t>(it - ids_.begin());
}

at::Tensor IncrementalDecoder::greedy_tokens(const at::Tensor& last_tokens) {
  auto best = kernels::row_top_k(step(last_tokens), 1).second.view({-1});  // [N] columns
  const auto columns = output_columns();
  return columns.defined() ? columns.index_select(0, best) : best;
}

IncrementalDecoder::TopK IncrementalDecoder::top_k_of(const at::Tensor& lprobs, int64_t width,
                                                      const std::vector<int64_t>& extra_columns) {
  TopK top;
  top.columns = lprobs.size(1);
  auto [values, indices] = kernels::row_top_k(lprobs, std::min(width, top.columns));  // [N, w]
  top.values = values.to(torch::kCPU).contiguous();
  top.indices = indices.to(torch::kCPU).contiguous();
  top.extra = lprobs.index_select(1, torch::tensor(extra_columns, torch::kLong).to(lprobs.device()))
                  .to(torch::kCPU)
                  .contiguous();  // [N, E]
  return top;
}

IncrementalDecoder::TopK IncrementalDecoder::step_top_k(const at::Tensor& last_tokens, int64_t width,
                                                        const std::vector<int64_t>& extra_columns) {
  return top_k_of(step(last_tokens), width, extra_columns);
}

void IncrementalDecoder::restrict_output(const std::vector<const std::vector<int64_t>*>& /*vocabularies*/) {
  throw std::invalid_argument("this model format cannot restrict its output vocabulary (shortlist)");
}

void IncrementalDecoder::expand_rows(int64_t rows, int64_t k) {
  select(torch::arange(rows, torch::TensorOptions().dtype(torch::kLong).device(device())).repeat_interleave(k));
}

namespace {

at::Tensor index_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  return torch::tensor(v, torch::kLong).to(device);
}

void check_options(const SearchOptions& o, const at::Tensor& src, const Steering& steering) {
  if (o.beam_size < 1) throw std::invalid_argument("beam size must be at least 1");
  if (o.nbest < 1 || o.nbest > o.beam_size)
    throw std::invalid_argument("nbest must be between 1 and the beam size (" + std::to_string(o.beam_size) + ")");
  const std::string sampling = sampling_problem(o, false);
  if (!sampling.empty()) throw std::invalid_argument(sampling);
  if (!steering.empty() && static_cast<int64_t>(steering.size()) != src.size(0))
    throw std::invalid_argument("search: " + std::to_string(steering.size()) + " steerings for " +
                                std::to_string(src.size(0)) + " sentences");
  if (o.sampling() && has_constraints(steering))
    throw std::invalid_argument("constraints need beam search: they cannot be combined with sampling");
}

// Per sentence, the `width` best of its k beam rows' candidates (each row's `row_width`
// best, from topk), best first; equal scores in order of beam then token, so the search
// is deterministic. Writes scores and flat indices beam * vocab + token.
void merge_row_candidates(const float* row_scores, const int64_t* row_tokens, int64_t sentences, int64_t k,
                          int64_t row_width, int64_t vocab, int64_t width, float* scores_out, int64_t* index_out) {
  struct Candidate {
    float score;
    int64_t index;
  };
  std::vector<Candidate> pool(static_cast<size_t>(k * row_width));
  for (int64_t s = 0; s < sentences; ++s) {
    for (int64_t beam = 0; beam < k; ++beam)
      for (int64_t c = 0; c < row_width; ++c) {
        const int64_t at = (s * k + beam) * row_width + c;
        const float score = std::isnan(row_scores[at]) ? -std::numeric_limits<float>::infinity() : row_scores[at];
        pool[static_cast<size_t>(beam * row_width + c)] = {score, beam * vocab + row_tokens[at]};
      }
    std::partial_sort(pool.begin(), pool.begin() + width, pool.end(), [](const Candidate& a, const Candidate& b) {
      return a.score > b.score || (a.score == b.score && a.index < b.index);
    });
    for (int64_t c = 0; c < width; ++c) {
      scores_out[s * width + c] = pool[static_cast<size_t>(c)].score;
      index_out[s * width + c] = pool[static_cast<size_t>(c)].index;
    }
  }
}

}  // namespace

bool has_constraints(const Steering& steering) {
  return std::any_of(steering.begin(), steering.end(), [](const SentenceSteering& s) { return !s.constraints.empty(); });
}

std::vector<const std::vector<int64_t>*> vocabularies_of(const Steering& steering) {
  std::vector<const std::vector<int64_t>*> lists;
  bool any = false;
  for (const auto& s : steering) {
    lists.push_back(&s.vocabulary);
    any = any || !s.vocabulary.empty();
  }
  if (!any) lists.clear();
  return lists;
}

std::vector<int64_t> max_lengths(const at::Tensor& src, const SearchOptions& o, const Steering& steering) {
  auto lengths = src.ne(o.pad_id).sum(1).to(torch::kCPU);
  std::vector<int64_t> out(src.size(0));
  for (int64_t i = 0; i < src.size(0); ++i) {
    // In double, capped before the cast: a limit beyond int64 (max_len_b near 2^63) must not wrap.
    const double limit = o.max_len_a * static_cast<double>(lengths[i].item<int64_t>()) + static_cast<double>(o.max_len_b);
    out[i] = std::max<int64_t>(1, limit >= static_cast<double>(o.max_len_cap) ? o.max_len_cap : static_cast<int64_t>(limit));
    if (!steering.empty()) {
      const auto& s = steering[static_cast<size_t>(i)];
      int64_t owed = static_cast<int64_t>(s.prefix.size());
      for (const auto& phrase : s.constraints) owed += static_cast<int64_t>(phrase.size());
      out[i] = std::max(out[i], owed + 1);
    }
  }
  return out;
}

double sampling_uniform(int64_t seed, int64_t stream, int64_t step) {
  const uint64_t x =
      mix64(mix64(mix64(static_cast<uint64_t>(seed)) ^ static_cast<uint64_t>(stream)) ^ static_cast<uint64_t>(step));
  return static_cast<double>(x >> 11) * 0x1.0p-53;  // 53 random bits
}

int64_t sample_token(const float* log_probs, int64_t vocab, const SearchOptions& o, double u) {
  const double inv_t = 1.0 / o.sampling_temperature;
  const int64_t k = o.sampling_topk == 0 ? vocab : std::min(o.sampling_topk, vocab);
  auto value = [&](int64_t i) {
    const float v = log_probs[i];
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
  };
  // Draws token i with weight exp((lp_i - top) / T) among `ids` (the first n of them).
  auto draw = [&](auto&& id_at, int64_t n, float top) {
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += std::exp((value(id_at(j)) - top) * inv_t);
    const double target = u * total;
    double sum = 0;
    int64_t last = id_at(0);
    for (int64_t j = 0; j < n; ++j) {
      const double w = std::exp((value(id_at(j)) - top) * inv_t);
      if (w == 0) continue;
      last = id_at(j);
      sum += w;
      if (sum > target) return last;
    }
    return last;  // rounding left target at the end
  };
  if (k == vocab && o.sampling_topp >= 1.0) {  // the whole distribution, in id order: no sort
    float top = -std::numeric_limits<float>::infinity();
    int64_t best = 0;
    for (int64_t i = 0; i < vocab; ++i)
      if (value(i) > top) top = value(i), best = i;
    if (!std::isfinite(top)) return best;
    return draw([](int64_t j) { return j; }, vocab, top);
  }
  // The k most probable, best first (ties by id: the same draw on every machine).
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return value(a) > value(b) || (value(a) == value(b) && a < b);
  });
  const float top = value(ids[0]);
  if (!std::isfinite(top)) return ids[0];
  int64_t n = k;
  if (o.sampling_topp < 1.0) {  // the smallest head holding topp of the k's probability
    double total = 0;
    for (int64_t j = 0; j < k; ++j) total += std::exp((value(ids[static_cast<size_t>(j)]) - top) * inv_t);
    double sum = 0;
    for (n = 0; n < k;) {
      sum += std::exp((value(ids[static_cast<size_t>(n)]) - top) * inv_t);
      ++n;
      if (sum >= o.sampling_topp * total) break;
    }
  }
  return draw([&](int64_t j) { return static_cast<int64_t>(ids[static_cast<size_t>(j)]); }, n, top);
}

void apply_token_rules(at::Tensor& lprobs, const OutputColumns& columns,
                       const std::vector<const std::vector<int64_t>*>& outputs,
                       const std::vector<const SearchOptions*>& options) {
  if (outputs.size() != options.size() || static_cast<int64_t>(options.size()) != lprobs.size(0))
    throw std::logic_error("token rules: " + std::to_string(options.size()) + " rows' options for " +
                           std::to_string(lprobs.size(0)) + " rows");
  // (row, column) pairs to mask and to scale, gathered on the host from the tokens alone.
  std::vector<int64_t> mask_rows, mask_columns, scale_rows, scale_columns;
  std::vector<float> scales;
  auto mask = [&](int64_t row, int64_t token) {
    if (const int64_t column = columns.column(token); column >= 0) {
      mask_rows.push_back(row);
      mask_columns.push_back(column);
    }
  };
  for (size_t r = 0; r < options.size(); ++r) {
    const SearchOptions* o = options[r];
    if (!o || !o->token_rules()) continue;
    const auto row = static_cast<int64_t>(r);
    const std::vector<int64_t>& out = *outputs[r];
    const auto length = static_cast<int64_t>(out.size());
    if (length < o->min_length) mask(row, o->eos_id);
    if (o->disable_unk) mask(row, o->unk_id);
    // The tokens that would end an n-gram already in the output: those that followed an earlier
    // occurrence of its last n - 1 tokens (fairseq's rule).
    if (const int64_t n = o->no_repeat_ngram_size; n > 0 && length >= n - 1)
      for (int64_t start = 0; start + n - 1 < length; ++start)
        if (std::equal(out.begin() + start, out.begin() + start + n - 1, out.end() - (n - 1)))
          mask(row, out[static_cast<size_t>(start + n - 1)]);
    if (o->repetition_penalty != 1.0) {
      std::vector<int64_t> seen = out;
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      for (const int64_t token : seen)
        if (const int64_t column = columns.column(token); column >= 0) {
          scale_rows.push_back(row);
          scale_columns.push_back(column);
          scales.push_back(static_cast<float>(o->repetition_penalty));
        }
    }
  }
  const auto device = lprobs.device();
  if (!scale_rows.empty()) {
    // Log-probabilities are <= 0, so a factor above 1 lowers them.
    const auto rows = index_tensor(scale_rows, device), cols = index_tensor(scale_columns, device);
    lprobs.index_put_({rows, cols}, lprobs.index({rows, cols}).mul(torch::tensor(scales).to(device)));
  }
  if (!mask_rows.empty())
    lprobs.index_put_({index_tensor(mask_rows, device), index_tensor(mask_columns, device)},
                      -std::numeric_limits<float>::infinity());
}

double length_penalty(int64_t length, double alpha) {
  return alpha == 0.0 ? 1.0 : std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

SearchResult greedy_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                           const Steering& steering) {
  check_options(options, src, steering);
  const int64_t batch = src.size(0);
  SearchResult result(batch, std::vector<Hypothesis>(1));
  if (batch == 0) return result;
  std::vector<int64_t> tags(batch);  // row -> sentence
  for (int64_t i = 0; i < batch; ++i) tags[i] = i;
  GreedyStream stream(decoder);
  stream.join(src, tags, options, steering);
  while (!stream.empty()) {
    if (options.stop()) throw SearchStopped();
    stream.step();
    for (auto& [sentence, hypothesis] : stream.take_finished()) result[sentence][0] = std::move(hypothesis);
  }
  return result;
}

namespace {

constexpr float kImpossible = -std::numeric_limits<float>::infinity();

// Beam search in named steps, one decoder step at a time:
//   candidates()  the decoder's step and each live sentence's best candidates (2k of k x V),
//                 with the prefix token of a sentence inside its prefix and the tokens that
//                 advance a constrained row's phrases;
//   choose()      per sentence, the hypotheses that end and the k rows that go on;
//   advance()     the decoder's rows reordered to the chosen ones.
// The rows of live sentence slot s are s * beams .. s * beams + beams - 1.
class BeamSearch {
 public:
  BeamSearch(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options, const Steering& steering)
      : decoder_(decoder),
        options_(options),
        steering_(steering),
        k_(options.beam_size),
        device_(decoder.device()),
        limits_(max_lengths(src, options, steering)),
        constrained_(has_constraints(steering)),
        ruled_(options.token_rules()),
        finish_at_(std::max<int64_t>(options.nbest, std::lround(static_cast<double>(k_) * options.patience))),
        finished_(src.size(0)) {}

  SearchResult run(const at::Tensor& src);

 private:
  // One step's candidates: each live sentence's `width` best (row score + log-probability, flat
  // index beam * vocab + column), the rows' own best, the prefix tokens and the constraint tokens.
  struct Candidates {
    const OutputColumns columns;
    int64_t eos_column = -1, vocab = 0, width = 0, row_width = 0;
    at::Tensor lprobs;              // [N, C] where prefixes or constraints need more than the best
    at::Tensor row_top, row_index;  // [N, row_width] on the host: each row's best, score added
    std::vector<float> scores;      // [sentences, width]
    std::vector<int64_t> index;     // [sentences, width]
    std::vector<int64_t> forced_rows, forced_tokens;  // a prefix's token for the first row of its sentence
    std::vector<float> forced_lp;
    std::vector<size_t> allowed_begin;  // row -> its constraint tokens [allowed_begin[r], allowed_begin[r + 1])
    std::vector<int64_t> allowed_tokens;
    std::vector<float> allowed_lp;
    explicit Candidates(const at::Tensor& output_columns) : columns(output_columns) {}
  };
  // The rows that go on, in sentence order, beams per sentence each.
  struct Next {
    std::vector<int64_t> rows, live, tokens;
    std::vector<float> scores;
    std::vector<std::vector<int64_t>> prefixes;
    std::vector<std::vector<float>> token_lps;
    std::vector<ConstraintState> states;
  };
  // A sentence's choice at one step: the rows to continue, their tokens and scores.
  struct Kept {
    std::vector<int64_t> rows, tokens;
    std::vector<float> scores;
    bool best_ends = false;  // the sentence's best candidate is eos
    void add(int64_t row, int64_t token, float score) {
      rows.push_back(row);
      tokens.push_back(token);
      scores.push_back(score);
    }
  };

  int64_t prefix_token(int64_t sentence, int64_t t) const;
  Candidates candidates(int64_t t);
  void step_decoder(Candidates& c, const std::vector<int64_t>& rows_at_limit,
                    const std::vector<const SearchOptions*>& ruled);
  void read_forced(Candidates& c);
  void read_allowed(Candidates& c);
  void choose(int64_t s, int64_t t, Candidates& c, size_t& forced_at, int64_t next_beams, Next& next);
  void keep_constrained(int64_t s, int64_t t, const Candidates& c, Kept& kept);
  void keep_best(int64_t s, const Candidates& c, Kept& kept);
  void end_hypothesis(int64_t sentence, int64_t row, float log_prob);
  float step_log_prob(int64_t row, float score) const;
  void advance(Next& next);
  SearchResult finish();

  IncrementalDecoder& decoder_;
  const SearchOptions& options_;
  const Steering& steering_;
  const int64_t k_;
  const at::Device device_;
  const std::vector<int64_t> limits_;
  const bool constrained_;
  const bool ruled_;  // options_.token_rules()
  const int64_t finish_at_;  // finished hypotheses that end a sentence: round(k x patience), at least nbest
  SearchResult finished_;

  // Every sentence starts as one row, the empty prefix, and becomes k rows (its beams) after the
  // first step picks their first tokens (expand_rows): the first step computes one row per
  // sentence instead of k copies of it (same output, faster: tools/bench/DECISIONS.md).
  int64_t beams_ = 1;                          // decoder rows per live sentence
  std::vector<int64_t> live_;                  // live sentence slot -> sentence
  std::vector<std::vector<int64_t>> prefixes_; // row -> tokens so far
  std::vector<std::vector<float>> token_lps_;  // row -> their log-probabilities
  std::vector<float> scores_;                  // row -> log-probability so far
  std::vector<ConstraintState> states_;        // row -> its constraints' progress (constrained searches only)
  at::Tensor last_;                            // [N] each row's last token
};

SearchResult BeamSearch::run(const at::Tensor& src) {
  const int64_t batch = src.size(0);
  if (batch == 0) return std::move(finished_);
  decoder_.start(src);
  if (const auto lists = vocabularies_of(steering_); !lists.empty()) decoder_.restrict_output(lists);
  live_.resize(static_cast<size_t>(batch));
  std::iota(live_.begin(), live_.end(), 0);
  prefixes_.resize(static_cast<size_t>(batch));
  token_lps_.resize(static_cast<size_t>(batch));
  scores_.assign(static_cast<size_t>(batch), 0.0f);
  last_ = torch::full({batch}, options_.bos_id, torch::TensorOptions().dtype(torch::kLong).device(device_));
  if (constrained_)
    for (const auto& s : steering_)
      states_.push_back(s.constraints.empty() ? ConstraintState() : ConstraintState(&s.constraints));

  for (int64_t t = 0; !live_.empty(); ++t) {
    if (options_.stop()) throw SearchStopped();
    Candidates c = candidates(t);
    const auto n_live = static_cast<int64_t>(live_.size());
    // Beams stay one row per sentence while every sentence is inside its prefix.
    const int64_t next_beams = beams_ == 1 && static_cast<int64_t>(c.forced_tokens.size()) == n_live ? 1 : k_;
    Next next;
    size_t forced_at = 0;
    for (int64_t s = 0; s < n_live; ++s) choose(s, t, c, forced_at, next_beams, next);
    if (next.live.empty()) break;
    if (beams_ < next_beams) {
      // After the first step: the sentences still running (their one row each), then k rows
      // per sentence, each a copy of it, which is what every beam continues (next.rows).
      if (next.live.size() != live_.size()) {
        std::vector<int64_t> kept;
        for (size_t i = 0; i < next.rows.size(); i += static_cast<size_t>(k_)) kept.push_back(next.rows[i]);
        decoder_.select(index_tensor(kept, device_));
      }
      decoder_.expand_rows(static_cast<int64_t>(next.live.size()), k_);
      beams_ = k_;
    } else if (next.live.size() == live_.size()) {
      // Beam j of sentence slot s is row s * k + j before and after; when no sentence left,
      // every row keeps its sentence and only the target side needs reordering.
      decoder_.reorder_within_sentences(index_tensor(next.rows, device_));
    } else {
      decoder_.select(index_tensor(next.rows, device_));
    }
    advance(next);
  }
  return finish();
}

// A sentence's prefix token at step t, or -1 once it is free.
int64_t BeamSearch::prefix_token(int64_t sentence, int64_t t) const {
  if (steering_.empty()) return -1;
  const auto& prefix = steering_[static_cast<size_t>(sentence)].prefix;
  return t < static_cast<int64_t>(prefix.size()) ? prefix[static_cast<size_t>(t)] : -1;
}

BeamSearch::Candidates BeamSearch::candidates(int64_t t) {
  Candidates c(decoder_.output_columns());
  c.eos_column = c.columns.column(options_.eos_id);
  if (c.eos_column < 0) throw std::logic_error("beam search: the decoder's output has no eos column");
  const auto n_live = static_cast<int64_t>(live_.size());
  // Sentences inside their prefix: one candidate, the prefix token, from their first beam (the
  // others are dead copies until the prefix ends, so the beam then grows from it).
  for (int64_t s = 0; s < n_live; ++s)
    if (const int64_t token = prefix_token(live_[s], t); token >= 0) {
      c.forced_rows.push_back(s * beams_);
      c.forced_tokens.push_back(token);
    }
  // Sentences at their length limit may only end.
  std::vector<int64_t> rows_at_limit;
  for (int64_t s = 0; s < n_live; ++s)
    if (t + 1 >= limits_[live_[s]])
      for (int64_t j = 0; j < beams_; ++j) rows_at_limit.push_back(s * beams_ + j);
  // The token rules hold for the rows of sentences past their prefix and short of their limit.
  std::vector<const SearchOptions*> ruled;
  if (ruled_)
    for (int64_t s = 0; s < n_live; ++s) {
      const bool free = prefix_token(live_[s], t) < 0 && t + 1 < limits_[live_[s]];
      ruled.insert(ruled.end(), static_cast<size_t>(beams_), free ? &options_ : nullptr);
    }
  step_decoder(c, rows_at_limit, ruled);
  // A row's ranking is its log-probabilities' (its score is one number added to all), so the
  // score is added to the 2k picked only.
  c.width = std::min<int64_t>(2 * k_, beams_ * c.vocab);
  c.row_width = c.row_top.size(1);  // min(width, vocab)
  c.row_top = (c.row_top + torch::tensor(scores_, torch::kFloat).unsqueeze(1)).contiguous();
  c.scores.resize(static_cast<size_t>(n_live * c.width));
  c.index.resize(c.scores.size());
  merge_row_candidates(c.row_top.data_ptr<float>(), c.row_index.data_ptr<int64_t>(), n_live, beams_, c.row_width,
                       c.vocab, c.width, c.scores.data(), c.index.data());
  if (!c.forced_tokens.empty()) read_forced(c);
  if (constrained_) read_allowed(c);
  return c;
}

// The decoder's step and each row's 2k best. The 2k best of a sentence's k x V candidates are
// among the 2k best of each beam row: one top-k per row on the device, then a merge of k x 2k on
// the host, far cheaper than a single topk over k x V on the CPU (tools/bench/DECISIONS.md).
void BeamSearch::step_decoder(Candidates& c, const std::vector<int64_t>& rows_at_limit,
                              const std::vector<const SearchOptions*>& ruled) {
  IncrementalDecoder::TopK top;
  if (constrained_ || !c.forced_tokens.empty() || ruled_) {
    c.lprobs = decoder_.step(last_);  // [N, C], N = live sentences * beams
    if (ruled_) {
      std::vector<const std::vector<int64_t>*> outputs;
      for (const auto& prefix : prefixes_) outputs.push_back(&prefix);
      apply_token_rules(c.lprobs, c.columns, outputs, ruled);
    }
    if (!rows_at_limit.empty()) {
      auto rows = index_tensor(rows_at_limit, device_);
      auto eos = c.lprobs.index_select(0, rows).select(1, c.eos_column).clone();
      c.lprobs.index_fill_(0, rows, kImpossible);
      c.lprobs.index_put_({rows, torch::full_like(rows, c.eos_column)}, eos);
    }
    if (constrained_) {  // a hypothesis ends only once it holds all its phrases
      std::vector<int64_t> owing;
      for (size_t r = 0; r < states_.size(); ++r)
        if (!states_[r].complete()) owing.push_back(static_cast<int64_t>(r));
      if (!owing.empty()) {
        auto rows = index_tensor(owing, device_);
        c.lprobs.index_put_({rows, torch::full_like(rows, c.eos_column)}, kImpossible);
      }
    }
    top = IncrementalDecoder::top_k_of(c.lprobs, 2 * k_, {});
  } else {
    top = decoder_.step_top_k(last_, 2 * k_, {c.eos_column});  // extra: [N, 1]
    // A row at its length limit: eos first, every other candidate impossible.
    for (const int64_t r : rows_at_limit) {
      top.values[r].fill_(kImpossible);
      top.values[r][0] = top.extra[r][0];
      top.indices[r][0] = c.eos_column;
    }
  }
  c.vocab = top.columns;  // C, tokens of output_columns()
  if (c.eos_column >= c.vocab) throw std::logic_error("beam search: the decoder's output has no eos column");
  c.row_top = top.values;  // [N, min(2k, C)], on the host
  c.row_index = top.indices;
}

// The log-probabilities of the prefix tokens.
void BeamSearch::read_forced(Candidates& c) {
  std::vector<int64_t> columns;
  for (const int64_t token : c.forced_tokens) columns.push_back(std::max<int64_t>(0, c.columns.column(token)));
  auto lp = c.lprobs.index({index_tensor(c.forced_rows, device_), index_tensor(columns, device_)})
                .to(torch::kCPU)
                .contiguous();
  c.forced_lp.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
  for (size_t i = 0; i < c.forced_tokens.size(); ++i)  // a prefix token the output cannot hold
    if (c.columns.column(c.forced_tokens[i]) < 0) c.forced_lp[i] = kImpossible;
}

// Constrained rows: the log-probabilities of the tokens that advance their constraints, which
// need not be among the row's best (Post & Vilar's third source of candidates).
void BeamSearch::read_allowed(Candidates& c) {
  c.allowed_begin.assign(static_cast<size_t>(c.lprobs.size(0)) + 1, 0);
  std::vector<int64_t> rows, columns;
  for (int64_t r = 0; r < c.lprobs.size(0); ++r) {
    c.allowed_begin[static_cast<size_t>(r)] = c.allowed_tokens.size();
    if (!std::isfinite(scores_[static_cast<size_t>(r)])) continue;
    for (const int64_t token : states_[static_cast<size_t>(r)].allowed()) {
      rows.push_back(r);
      c.allowed_tokens.push_back(token);
      columns.push_back(std::max<int64_t>(0, c.columns.column(token)));
    }
  }
  c.allowed_begin.back() = c.allowed_tokens.size();
  if (rows.empty()) return;
  auto lp = c.lprobs.index({index_tensor(rows, device_), index_tensor(columns, device_)}).to(torch::kCPU).contiguous();
  c.allowed_lp.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
  for (size_t i = 0; i < c.allowed_lp.size(); ++i)  // a token the output cannot hold
    if (c.columns.column(c.allowed_tokens[i]) < 0) c.allowed_lp[i] = kImpossible;
}

// Live sentence slot s: its ended hypotheses into finished_, its next_beams continuing rows into
// `next` (none once it is finished).
void BeamSearch::choose(int64_t s, int64_t t, Candidates& c, size_t& forced_at, int64_t next_beams, Next& next) {
  const int64_t sentence = live_[s];
  Kept kept;
  const bool forced = forced_at < c.forced_rows.size() && c.forced_rows[forced_at] == s * beams_;
  const bool owes = constrained_ && !steering_[static_cast<size_t>(sentence)].constraints.empty();
  if (forced) {
    const float score = scores_[s * beams_] + c.forced_lp[forced_at];
    kept.add(s * beams_, c.forced_tokens[forced_at], std::isnan(score) ? kImpossible : score);
    ++forced_at;
  } else if (owes) {
    keep_constrained(s, t, c, kept);
  } else {
    keep_best(s, c, kept);
  }
  // A sentence is finished once it holds round(k x patience) complete hypotheses (k by default:
  // fairseq's criterion; CTranslate2's with its patience), or with early_exit once its best
  // candidate ended it and nbest are complete (OpenNMT-py's). early_exit is faster but costs a
  // little BLEU, so it is not the default (tools/bench/DECISIONS.md).
  const auto complete = static_cast<int64_t>(finished_[sentence].size());
  if (complete >= finish_at_ || (options_.early_exit && kept.best_ends && complete >= options_.nbest)) return;
  if (kept.rows.empty()) {
    // Every continuation is impossible (-inf, e.g. eos forced at the length limit with zero
    // probability): return the best prefix rather than nothing.
    if (complete == 0) end_hypothesis(sentence, s * beams_, scores_[s * beams_]);
    return;
  }
  while (static_cast<int64_t>(kept.rows.size()) < next_beams)  // pad the beam with a dead copy
    kept.add(kept.rows.back(), kept.tokens.back(), kImpossible);
  for (int64_t j = 0; j < next_beams; ++j) {
    next.rows.push_back(kept.rows[j]);
    next.tokens.push_back(kept.tokens[j]);
    next.scores.push_back(kept.scores[j]);
    auto prefix = prefixes_[kept.rows[j]];
    prefix.push_back(kept.tokens[j]);
    next.prefixes.push_back(std::move(prefix));
    auto lps = token_lps_[kept.rows[j]];
    lps.push_back(step_log_prob(kept.rows[j], kept.scores[j]));
    next.token_lps.push_back(std::move(lps));
    if (constrained_) next.states.push_back(states_[static_cast<size_t>(kept.rows[j])].advance(kept.tokens[j]));
  }
  next.live.push_back(sentence);
}

// Dynamic beam allocation: the candidates are the best over all rows, each row's best and each
// row's constraint tokens; the beam is shared by banks of equal progress.
void BeamSearch::keep_constrained(int64_t s, int64_t t, const Candidates& c, Kept& kept) {
  const int64_t sentence = live_[s];
  std::vector<BankCandidate> pool;
  const int64_t total = states_[static_cast<size_t>(s * beams_)].total();
  const int64_t positions_left = limits_[sentence] - 1 - t;  // tokens before the last eos, this one included
  auto add = [&](float score, int64_t beam, int64_t token) {
    if (!std::isfinite(score)) return;
    for (const auto& candidate : pool)
      if (candidate.beam == beam && candidate.token == token) return;
    const auto& state = states_[static_cast<size_t>(s * beams_ + beam)];
    if (token == options_.eos_id) {
      pool.push_back({score, beam, token, total});  // eos was masked unless complete
      return;
    }
    const int64_t owed = state.advance(token).remaining();
    if (owed > positions_left - 1) return;  // no room left for its phrases
    pool.push_back({score, beam, token, total - owed});
  };
  for (int64_t i = 0; i < c.width; ++i) {
    const int64_t at = c.index[s * c.width + i];
    add(c.scores[s * c.width + i], at / c.vocab, c.columns.token(at % c.vocab));
  }
  for (int64_t beam = 0; beam < beams_; ++beam) {
    const int64_t row = s * beams_ + beam;
    add(c.row_top.data_ptr<float>()[row * c.row_width], beam,
        c.columns.token(c.row_index.data_ptr<int64_t>()[row * c.row_width]));
    for (size_t i = c.allowed_begin[static_cast<size_t>(row)]; i < c.allowed_begin[static_cast<size_t>(row) + 1]; ++i)
      add(scores_[static_cast<size_t>(row)] + c.allowed_lp[i], beam, c.allowed_tokens[i]);
  }
  const auto chosen = allocate_beam(std::move(pool), total, k_);
  for (size_t i = 0; i < chosen.size(); ++i) {
    const int64_t row = s * beams_ + chosen[i].beam;
    if (chosen[i].token == options_.eos_id) {
      if (i == 0) kept.best_ends = true;
      if (static_cast<int64_t>(finished_[sentence].size()) < finish_at_) end_hypothesis(sentence, row, chosen[i].score);
    } else {
      kept.add(row, chosen[i].token, chosen[i].score);
    }
  }
}

// The sentence's best candidates in order until k rows go on.
void BeamSearch::keep_best(int64_t s, const Candidates& c, Kept& kept) {
  const int64_t sentence = live_[s];
  for (int64_t i = 0; i < c.width && static_cast<int64_t>(kept.rows.size()) < k_; ++i) {
    const float score = c.scores[s * c.width + i];
    if (!std::isfinite(score)) break;
    const int64_t beam = c.index[s * c.width + i] / c.vocab;
    const int64_t token = c.columns.token(c.index[s * c.width + i] % c.vocab);
    const int64_t row = s * beams_ + beam;
    if (token == options_.eos_id) {
      if (i == 0) kept.best_ends = true;
      // As fairseq: only an eos among the k best candidates ends a hypothesis, so a beam of one
      // is exactly greedy search.
      if (i < k_ && static_cast<int64_t>(finished_[sentence].size()) < finish_at_) end_hypothesis(sentence, row, score);
    } else {
      kept.add(row, token, score);
    }
  }
}

// The log-probability of the token that takes row `row` to `score` (rows carry sums only; the
// difference is within a float rounding of the sum of the step's value).
float BeamSearch::step_log_prob(int64_t row, float score) const {
  const float before = scores_[static_cast<size_t>(row)];
  return std::isfinite(before) ? score - before : kImpossible;
}

// Row `row`'s tokens so far, ended by eos with `log_prob` in all.
void BeamSearch::end_hypothesis(int64_t sentence, int64_t row, float log_prob) {
  Hypothesis h;
  h.tokens = prefixes_[row];
  h.log_prob = log_prob;
  h.token_log_probs = token_lps_[row];
  h.token_log_probs.push_back(step_log_prob(row, log_prob));
  h.score = log_prob / length_penalty(static_cast<int64_t>(h.tokens.size()) + 1, options_.length_penalty);
  finished_[sentence].push_back(std::move(h));
}

void BeamSearch::advance(Next& next) {
  live_ = std::move(next.live);
  prefixes_ = std::move(next.prefixes);
  token_lps_ = std::move(next.token_lps);
  states_ = std::move(next.states);
  scores_ = std::move(next.scores);
  last_ = index_tensor(next.tokens, device_);
}

// Each sentence's nbest, best first.
SearchResult BeamSearch::finish() {
  for (auto& hyps : finished_) {
    std::stable_sort(hyps.begin(), hyps.end(), [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    if (static_cast<int64_t>(hyps.size()) > options_.nbest) hyps.resize(options_.nbest);
  }
  return std::move(finished_);
}

}  // namespace

SearchResult beam_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                         const Steering& steering) {
  check_options(options, src, steering);
  if (options.sampling()) throw std::invalid_argument("sampling needs a beam of 1");
  return BeamSearch(decoder, src, options, steering).run(src);
}

SearchResult search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                    const Steering& steering) {
  return options.beam_size == 1 && !has_constraints(steering) ? greedy_search(decoder, src, options, steering)
                                                              : beam_search(decoder, src, options, steering);
}

}  // namespace torchmt
