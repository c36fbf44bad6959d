#include "torchmt/decoding/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/decoding/greedy_stream.h"
#include "torchmt/util/split_mix.h"
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
    auto limit = static_cast<int64_t>(o.max_len_a * lengths[i].item<int64_t>() + static_cast<double>(o.max_len_b));
    out[i] = std::max<int64_t>(1, std::min(limit, o.max_len_cap));
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
    stream.step();
    for (auto& [sentence, hypothesis] : stream.take_finished()) result[sentence][0] = std::move(hypothesis);
  }
  return result;
}

SearchResult beam_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                         const Steering& steering) {
  check_options(options, src, steering);
  if (options.sampling()) throw std::invalid_argument("sampling needs a beam of 1");
  const int64_t batch = src.size(0);
  const int64_t k = options.beam_size;
  const auto device = decoder.device();
  const auto limits = max_lengths(src, options, steering);
  SearchResult finished(batch);
  if (batch == 0) return finished;
  decoder.start(src);
  if (const auto lists = vocabularies_of(steering); !lists.empty()) decoder.restrict_output(lists);
  // A sentence's prefix token at step t, or -1 once it is free.
  auto forced_token = [&](int64_t sentence, int64_t t) -> int64_t {
    if (steering.empty()) return -1;
    const auto& prefix = steering[static_cast<size_t>(sentence)].prefix;
    return t < static_cast<int64_t>(prefix.size()) ? prefix[static_cast<size_t>(t)] : -1;
  };
  // Every sentence starts as one row, the empty prefix, and becomes k rows (its beams) after the
  // first step picks their first tokens (expand_rows): the first step computes one row per
  // sentence instead of k copies of it (same output, faster: tools/bench/DECISIONS.md).
  int64_t beams = 1;  // decoder rows per live sentence

  std::vector<int64_t> live(batch);  // live sentence slot -> sentence
  for (int64_t i = 0; i < batch; ++i) live[i] = i;
  std::vector<std::vector<int64_t>> prefixes(batch);  // row -> tokens so far
  std::vector<float> scores(batch, 0.0f);
  auto last = torch::full({batch}, options.bos_id, torch::TensorOptions().dtype(torch::kLong).device(device));
  const bool constrained = has_constraints(steering);
  std::vector<ConstraintState> states;  // row -> its constraints' progress (constrained searches only)
  if (constrained)
    for (const auto& s : steering)
      states.push_back(s.constraints.empty() ? ConstraintState() : ConstraintState(&s.constraints));

  for (int64_t t = 0; !live.empty(); ++t) {
    const int64_t n_live = static_cast<int64_t>(live.size());
    const OutputColumns columns(decoder.output_columns());
    const int64_t eos_column = columns.column(options.eos_id);
    if (eos_column < 0) throw std::logic_error("beam search: the decoder's output has no eos column");
    // Sentences inside their prefix: one candidate, the prefix token, from their first beam (the
    // others are dead copies until the prefix ends, so the beam then grows from it).
    std::vector<int64_t> forced_sentence_rows, forced_tokens, forced_columns;
    for (int64_t s = 0; s < n_live; ++s)
      if (const int64_t token = forced_token(live[s], t); token >= 0) {
        forced_sentence_rows.push_back(s * beams);
        forced_tokens.push_back(token);
        forced_columns.push_back(std::max<int64_t>(0, columns.column(token)));
      }
    // Sentences at their length limit may only end.
    std::vector<int64_t> forced_rows;
    for (int64_t s = 0; s < n_live; ++s)
      if (t + 1 >= limits[live[s]])
        for (int64_t j = 0; j < beams; ++j) forced_rows.push_back(s * beams + j);
    // The 2k best of a sentence's k x V candidates are among the 2k best of each beam row:
    // one top-k per row on the device, then a merge of k x 2k on the host, far cheaper than a
    // single topk over k x V on the CPU (tools/bench/DECISIONS.md).
    // A row's ranking is its log-probabilities' (its score is one number added to all), so
    // the score is added to the 2k picked only.
    at::Tensor lprobs;  // [N, C], where prefixes or constraints need more than each row's best
    IncrementalDecoder::TopK top;
    if (constrained || !forced_tokens.empty()) {
      lprobs = decoder.step(last);  // [N, C], N = n_live * beams
      if (!forced_rows.empty()) {
        auto rows = index_tensor(forced_rows, device);
        auto eos_col = lprobs.index_select(0, rows).select(1, eos_column).clone();
        lprobs.index_fill_(0, rows, -std::numeric_limits<float>::infinity());
        lprobs.index_put_({rows, torch::full_like(rows, eos_column)}, eos_col);
      }
      if (constrained) {  // a hypothesis ends only once it holds all its phrases
        std::vector<int64_t> owing;
        for (size_t r = 0; r < states.size(); ++r)
          if (!states[r].complete()) owing.push_back(static_cast<int64_t>(r));
        if (!owing.empty()) {
          auto rows = index_tensor(owing, device);
          lprobs.index_put_({rows, torch::full_like(rows, eos_column)}, -std::numeric_limits<float>::infinity());
        }
      }
      top = IncrementalDecoder::top_k_of(lprobs, 2 * k, {});
    } else {
      top = decoder.step_top_k(last, 2 * k, {eos_column});  // extra: [N, 1]
      // A row at its length limit: eos first, every other candidate impossible.
      for (const int64_t r : forced_rows) {
        top.values[r].fill_(-std::numeric_limits<float>::infinity());
        top.values[r][0] = top.extra[r][0];
        top.indices[r][0] = eos_column;
      }
    }
    const int64_t vocab = top.columns;  // C, tokens of output_columns()
    auto row_top = top.values, row_index = top.indices;  // [N, min(2k, C)], on the host
    if (eos_column >= vocab) throw std::logic_error("beam search: the decoder's output has no eos column");
    const int64_t width = std::min<int64_t>(2 * k, beams * vocab);
    const int64_t row_width = row_top.size(1);  // min(width, vocab)
    row_top = (row_top + torch::tensor(scores, torch::kFloat).unsqueeze(1)).contiguous();
    std::vector<float> sc(static_cast<size_t>(n_live * width));
    std::vector<int64_t> ix(sc.size());  // flat index beam * V + token, as into [k, V]
    merge_row_candidates(row_top.data_ptr<float>(), row_index.data_ptr<int64_t>(), n_live, beams, row_width, vocab,
                         width, sc.data(), ix.data());
    std::vector<float> forced_lp;
    if (!forced_tokens.empty()) {
      auto lp = lprobs.index({index_tensor(forced_sentence_rows, device), index_tensor(forced_columns, device)})
                    .to(torch::kCPU).contiguous();
      forced_lp.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
      for (size_t i = 0; i < forced_tokens.size(); ++i)  // a prefix token the output cannot hold
        if (columns.column(forced_tokens[i]) < 0) forced_lp[i] = -std::numeric_limits<float>::infinity();
    }
    // Constrained rows: the log-probabilities of the tokens that advance their constraints,
    // which need not be among the row's best (Post & Vilar's third source of candidates).
    std::vector<size_t> allowed_begin(constrained ? lprobs.size(0) + 1 : 0, 0);
    std::vector<int64_t> allowed_tokens;
    std::vector<float> allowed_lp;
    if (constrained) {
      std::vector<int64_t> rows, cols;
      for (int64_t r = 0; r < lprobs.size(0); ++r) {
        allowed_begin[static_cast<size_t>(r)] = allowed_tokens.size();
        if (!std::isfinite(scores[static_cast<size_t>(r)])) continue;
        for (const int64_t token : states[static_cast<size_t>(r)].allowed()) {
          rows.push_back(r);
          allowed_tokens.push_back(token);
          cols.push_back(std::max<int64_t>(0, columns.column(token)));
        }
      }
      allowed_begin.back() = allowed_tokens.size();
      if (!rows.empty()) {
        auto lp = lprobs.index({index_tensor(rows, device), index_tensor(cols, device)}).to(torch::kCPU).contiguous();
        allowed_lp.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
        for (size_t i = 0; i < allowed_lp.size(); ++i)  // a token the output cannot hold
          if (columns.column(allowed_tokens[i]) < 0) allowed_lp[i] = -std::numeric_limits<float>::infinity();
      }
    }
    // Beams stay one row per sentence while every sentence is inside its prefix.
    const int64_t next_beams = beams == 1 && static_cast<int64_t>(forced_tokens.size()) == n_live ? 1 : k;
    size_t forced_at = 0;

    std::vector<int64_t> next_rows, next_live, next_tokens;
    std::vector<float> next_scores;
    std::vector<std::vector<int64_t>> next_prefixes;
    std::vector<ConstraintState> next_states;
    for (int64_t s = 0; s < n_live; ++s) {
      const int64_t sentence = live[s];
      auto& done = finished[sentence];
      std::vector<int64_t> rows, tokens;
      std::vector<float> kept_scores;
      bool best_ends = false;  // the sentence's best candidate is eos
      const bool forced = forced_at < forced_sentence_rows.size() && forced_sentence_rows[forced_at] == s * beams;
      if (forced) {
        const float score = scores[s * beams] + forced_lp[forced_at];
        rows.push_back(s * beams);
        tokens.push_back(forced_tokens[forced_at]);
        kept_scores.push_back(std::isnan(score) ? -std::numeric_limits<float>::infinity() : score);
        ++forced_at;
      }
      const bool owes = constrained && !steering[static_cast<size_t>(sentence)].constraints.empty();
      if (!forced && owes) {
        // Dynamic beam allocation: the candidates are the best over all rows, each row's best
        // and each row's constraint tokens; the beam is shared by banks of equal progress.
        std::vector<BankCandidate> pool;
        const int64_t total = states[static_cast<size_t>(s * beams)].total();
        const int64_t positions_left = limits[sentence] - 1 - t;  // tokens before the last eos, this one included
        auto add = [&](float score, int64_t beam, int64_t token) {
          if (!std::isfinite(score)) return;
          for (const auto& c : pool)
            if (c.beam == beam && c.token == token) return;
          const auto& state = states[static_cast<size_t>(s * beams + beam)];
          if (token == options.eos_id) {
            pool.push_back({score, beam, token, total});  // eos was masked unless complete
            return;
          }
          const int64_t owed = state.advance(token).remaining();
          if (owed > positions_left - 1) return;  // no room left for its phrases
          pool.push_back({score, beam, token, total - owed});
        };
        for (int64_t c = 0; c < width; ++c) {
          const int64_t at = ix[s * width + c];
          add(sc[s * width + c], at / vocab, columns.token(at % vocab));
        }
        for (int64_t beam = 0; beam < beams; ++beam) {
          const int64_t row = s * beams + beam;
          add(row_top.data_ptr<float>()[row * row_width], beam,
              columns.token(row_index.data_ptr<int64_t>()[row * row_width]));
          for (size_t i = allowed_begin[static_cast<size_t>(row)]; i < allowed_begin[static_cast<size_t>(row) + 1]; ++i)
            add(scores[static_cast<size_t>(row)] + allowed_lp[i], beam, allowed_tokens[i]);
        }
        const auto kept = allocate_beam(std::move(pool), total, k);
        for (size_t i = 0; i < kept.size(); ++i) {
          const int64_t row = s * beams + kept[i].beam;
          if (kept[i].token == options.eos_id) {
            if (i == 0) best_ends = true;
            if (static_cast<int64_t>(done.size()) < k) {
              Hypothesis h;
              h.tokens = prefixes[row];
              h.log_prob = kept[i].score;
              h.score = kept[i].score / length_penalty(static_cast<int64_t>(h.tokens.size()) + 1, options.length_penalty);
              done.push_back(std::move(h));
            }
          } else {
            rows.push_back(row);
            tokens.push_back(kept[i].token);
            kept_scores.push_back(kept[i].score);
          }
        }
      }
      for (int64_t c = 0; !forced && !owes && c < width && static_cast<int64_t>(rows.size()) < k; ++c) {
        const float score = sc[s * width + c];
        if (!std::isfinite(score)) break;
        const int64_t beam = ix[s * width + c] / vocab;
        const int64_t token = columns.token(ix[s * width + c] % vocab);
        const int64_t row = s * beams + beam;
        if (token == options.eos_id) {
          if (c == 0) best_ends = true;
          // As fairseq: only an eos among the k best candidates ends a hypothesis, so a
          // beam of one is exactly greedy search.
          if (c < k && static_cast<int64_t>(done.size()) < k) {
            Hypothesis h;
            h.tokens = prefixes[row];
            h.log_prob = score;
            h.score = score / length_penalty(static_cast<int64_t>(h.tokens.size()) + 1, options.length_penalty);
            done.push_back(std::move(h));
          }
        } else {
          rows.push_back(row);
          tokens.push_back(token);
          kept_scores.push_back(score);
        }
      }
      // A sentence is finished once it holds k complete hypotheses (fairseq's criterion), or
      // with early_exit once its best candidate ended it and nbest are complete (OpenNMT-py's;
      // CTranslate2 4 runs to beam_size * patience complete ones). early_exit is faster but
      // costs a little BLEU, so it is not the default (tools/bench/DECISIONS.md).
      const auto complete = static_cast<int64_t>(done.size());
      if (complete >= k || (options.early_exit && best_ends && complete >= options.nbest)) continue;
      if (rows.empty()) {
        // Every continuation is impossible (-inf, e.g. eos forced at the length limit with
        // zero probability): return the best prefix rather than nothing.
        if (done.empty()) {
          Hypothesis h;
          h.tokens = prefixes[s * beams];
          h.log_prob = scores[s * beams];
          h.score = h.log_prob / length_penalty(static_cast<int64_t>(h.tokens.size()) + 1, options.length_penalty);
          done.push_back(std::move(h));
        }
        continue;
      }
      while (static_cast<int64_t>(rows.size()) < next_beams) {  // pad the beam with a dead copy
        rows.push_back(rows.back());
        tokens.push_back(tokens.back());
        kept_scores.push_back(-std::numeric_limits<float>::infinity());
      }
      for (int64_t j = 0; j < next_beams; ++j) {
        next_rows.push_back(rows[j]);
        next_tokens.push_back(tokens[j]);
        next_scores.push_back(kept_scores[j]);
        auto prefix = prefixes[rows[j]];
        prefix.push_back(tokens[j]);
        next_prefixes.push_back(std::move(prefix));
        if (constrained) next_states.push_back(states[static_cast<size_t>(rows[j])].advance(tokens[j]));
      }
      next_live.push_back(sentence);
    }
    if (next_live.empty()) break;
    if (beams < next_beams) {
      // After the first step: the sentences still running (their one row each), then k rows
      // per sentence, each a copy of it, which is what every beam continues (next_rows).
      if (next_live.size() != live.size()) {
        std::vector<int64_t> kept;
        for (size_t i = 0; i < next_rows.size(); i += static_cast<size_t>(k)) kept.push_back(next_rows[i]);
        decoder.select(index_tensor(kept, device));
      }
      decoder.expand_rows(static_cast<int64_t>(next_live.size()), k);
      beams = k;
    } else if (next_live.size() == live.size()) {
      // Beam j of sentence slot s is row s * k + j before and after; when no sentence left,
      // every row keeps its sentence and only the target side needs reordering.
      decoder.reorder_within_sentences(index_tensor(next_rows, device));
    } else {
      decoder.select(index_tensor(next_rows, device));
    }
    live = std::move(next_live);
    prefixes = std::move(next_prefixes);
    states = std::move(next_states);
    scores = std::move(next_scores);
    last = index_tensor(next_tokens, device);
  }
  for (auto& hyps : finished) {
    std::stable_sort(hyps.begin(), hyps.end(), [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    if (static_cast<int64_t>(hyps.size()) > options.nbest) hyps.resize(options.nbest);
  }
  return finished;
}

SearchResult search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options,
                    const Steering& steering) {
  return options.beam_size == 1 && !has_constraints(steering) ? greedy_search(decoder, src, options, steering)
                                                              : beam_search(decoder, src, options, steering);
}

}  // namespace torchmt
