#include "torchmt/decoding/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/decoding/greedy_stream.h"
#include "../kernels/primitives.h"

namespace torchmt {

at::Tensor IncrementalDecoder::greedy_tokens(const at::Tensor& last_tokens) {
  return kernels::row_top_k(step(last_tokens), 1).second.view({-1});  // [N]
}

void IncrementalDecoder::expand_rows(int64_t rows, int64_t k) {
  select(torch::arange(rows, torch::TensorOptions().dtype(torch::kLong).device(device())).repeat_interleave(k));
}

namespace {

at::Tensor index_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  return torch::tensor(v, torch::kLong).to(device);
}

void check_options(const SearchOptions& o) {
  if (o.beam_size < 1) throw std::invalid_argument("beam size must be at least 1");
  if (o.nbest < 1 || o.nbest > o.beam_size)
    throw std::invalid_argument("nbest must be between 1 and the beam size (" + std::to_string(o.beam_size) + ")");
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

std::vector<int64_t> max_lengths(const at::Tensor& src, const SearchOptions& o) {
  auto lengths = src.ne(o.pad_id).sum(1).to(torch::kCPU);
  std::vector<int64_t> out(src.size(0));
  for (int64_t i = 0; i < src.size(0); ++i) {
    auto limit = static_cast<int64_t>(o.max_len_a * lengths[i].item<int64_t>() + static_cast<double>(o.max_len_b));
    out[i] = std::max<int64_t>(1, std::min(limit, o.max_len_cap));
  }
  return out;
}

double length_penalty(int64_t length, double alpha) {
  return alpha == 0.0 ? 1.0 : std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

SearchResult greedy_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options) {
  check_options(options);
  const int64_t batch = src.size(0);
  SearchResult result(batch, std::vector<Hypothesis>(1));
  if (batch == 0) return result;
  std::vector<int64_t> tags(batch);  // row -> sentence
  for (int64_t i = 0; i < batch; ++i) tags[i] = i;
  GreedyStream stream(decoder);
  stream.join(src, tags, options);
  while (!stream.empty()) {
    stream.step();
    for (auto& [sentence, hypothesis] : stream.take_finished()) result[sentence][0] = std::move(hypothesis);
  }
  return result;
}

SearchResult beam_search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options) {
  check_options(options);
  const int64_t batch = src.size(0);
  const int64_t k = options.beam_size;
  const auto device = decoder.device();
  const auto limits = max_lengths(src, options);
  SearchResult finished(batch);
  if (batch == 0) return finished;
  decoder.start(src);
  // Every sentence starts as one row, the empty prefix, and becomes k rows (its beams) after the
  // first step picks their first tokens (expand_rows): the first step computes one row per
  // sentence instead of k copies of it (same output, faster: tools/bench/DECISIONS.md).
  int64_t beams = 1;  // decoder rows per live sentence

  std::vector<int64_t> live(batch);  // live sentence slot -> sentence
  for (int64_t i = 0; i < batch; ++i) live[i] = i;
  std::vector<std::vector<int64_t>> prefixes(batch);  // row -> tokens so far
  std::vector<float> scores(batch, 0.0f);
  auto last = torch::full({batch}, options.bos_id, torch::TensorOptions().dtype(torch::kLong).device(device));

  for (int64_t t = 0; !live.empty(); ++t) {
    const int64_t n_live = static_cast<int64_t>(live.size());
    auto lprobs = decoder.step(last);  // [N, V], N = n_live * beams
    const int64_t vocab = lprobs.size(1);
    // Sentences at their length limit may only end.
    std::vector<int64_t> forced_rows;
    for (int64_t s = 0; s < n_live; ++s)
      if (t + 1 >= limits[live[s]])
        for (int64_t j = 0; j < beams; ++j) forced_rows.push_back(s * beams + j);
    if (!forced_rows.empty()) {
      auto rows = index_tensor(forced_rows, device);
      auto eos_col = lprobs.index_select(0, rows).select(1, options.eos_id).clone();
      lprobs.index_fill_(0, rows, -std::numeric_limits<float>::infinity());
      lprobs.index_put_({rows, torch::full_like(rows, options.eos_id)}, eos_col);
    }
    // The 2k best of a sentence's k x V candidates are among the 2k best of each beam row:
    // one top-k per row on the device, then a merge of k x 2k on the host, far cheaper than a
    // single topk over k x V on the CPU (tools/bench/DECISIONS.md).
    // A row's ranking is its log-probabilities' (its score is one number added to all), so
    // the score is added to the 2k picked only.
    const int64_t width = std::min<int64_t>(2 * k, beams * vocab);
    const int64_t row_width = std::min<int64_t>(width, vocab);
    auto [row_top, row_index] = kernels::row_top_k(lprobs, row_width);  // [N, row_width]
    row_top = (row_top.to(torch::kCPU) + torch::tensor(scores, torch::kFloat).unsqueeze(1)).contiguous();
    row_index = row_index.to(torch::kCPU).contiguous();
    std::vector<float> sc(static_cast<size_t>(n_live * width));
    std::vector<int64_t> ix(sc.size());  // flat index beam * V + token, as into [k, V]
    merge_row_candidates(row_top.data_ptr<float>(), row_index.data_ptr<int64_t>(), n_live, beams, row_width, vocab,
                         width, sc.data(), ix.data());

    std::vector<int64_t> next_rows, next_live, next_tokens;
    std::vector<float> next_scores;
    std::vector<std::vector<int64_t>> next_prefixes;
    for (int64_t s = 0; s < n_live; ++s) {
      const int64_t sentence = live[s];
      auto& done = finished[sentence];
      std::vector<int64_t> rows, tokens;
      std::vector<float> kept_scores;
      bool best_ends = false;  // the sentence's best candidate is eos
      for (int64_t c = 0; c < width && static_cast<int64_t>(rows.size()) < k; ++c) {
        const float score = sc[s * width + c];
        if (!std::isfinite(score)) break;
        const int64_t beam = ix[s * width + c] / vocab;
        const int64_t token = ix[s * width + c] % vocab;
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
      while (static_cast<int64_t>(rows.size()) < k) {  // pad the beam with a dead copy
        rows.push_back(rows.back());
        tokens.push_back(tokens.back());
        kept_scores.push_back(-std::numeric_limits<float>::infinity());
      }
      for (int64_t j = 0; j < k; ++j) {
        next_rows.push_back(rows[j]);
        next_tokens.push_back(tokens[j]);
        next_scores.push_back(kept_scores[j]);
        auto prefix = prefixes[rows[j]];
        prefix.push_back(tokens[j]);
        next_prefixes.push_back(std::move(prefix));
      }
      next_live.push_back(sentence);
    }
    if (next_live.empty()) break;
    if (beams < k) {
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
    scores = std::move(next_scores);
    last = index_tensor(next_tokens, device);
  }
  for (auto& hyps : finished) {
    std::stable_sort(hyps.begin(), hyps.end(), [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    if (static_cast<int64_t>(hyps.size()) > options.nbest) hyps.resize(options.nbest);
  }
  return finished;
}

SearchResult search(IncrementalDecoder& decoder, const at::Tensor& src, const SearchOptions& options) {
  return options.beam_size == 1 ? greedy_search(decoder, src, options) : beam_search(decoder, src, options);
}

}  // namespace torchmt
