#include "decoding/transformer_decoder.h"

#include <algorithm>
#include <limits>

#include <torch/torch.h>

#include "../kernels/primitives.h"
#include "model/linear.h"
#include "model/masks.h"

namespace torchmt {

namespace {

// Logits [N, V] -> log-probabilities, float32. The projection's output is this step's own
// tensor: normalised where it lies (CPU, fp32).
at::Tensor log_probabilities(at::Tensor logits) {
  logits = logits.to(torch::kFloat);
  if (kernels::try_log_softmax_in_place_cpu(logits)) return logits;
  return torch::log_softmax(logits, -1);
}

}  // namespace

TransformerDecoder::TransformerDecoder(Transformer model, bool use_cache, std::shared_ptr<RestrictedOutputs> outputs)
    : model_(std::move(model)),
      use_cache_(use_cache),
      restricted_made_(outputs ? std::move(outputs) : std::make_shared<RestrictedOutputs>()) {}

torch::nn::Linear RestrictedOutputs::get(const torch::nn::Linear& whole, const at::Tensor& columns) {
  const auto version = [](const at::Tensor& t) {
    return t.defined() && !t.is_inference() ? static_cast<uint32_t>(t._version()) : 0u;
  };
  const uint32_t weight_version = version(whole->weight), bias_version = version(whole->bias);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = made_.begin(); it != made_.end(); ++it) {
    if (it->columns.size(0) != columns.size(0) || !torch::equal(it->columns, columns)) continue;
    if (it->weight_version == weight_version && it->bias_version == bias_version) {
      std::rotate(it, it + 1, made_.end());  // the most recently used last
      return made_.back().layer;
    }
    made_.erase(it);  // the whole layer has changed since
    break;
  }
  if (made_.size() == kKept) made_.erase(made_.begin());
  made_.push_back({columns, weight_version, bias_version, select_output_rows(whole, columns)});
  return made_.back().layer;
}

at::Device TransformerDecoder::device() const { return model_->fc_out->weight.device(); }

void TransformerDecoder::start(const at::Tensor& src) {
  torch::NoGradGuard no_grad;
  rows_ = src.size(0);
  restriction_.reset();
  restricted_out_ = nullptr;
  src_mask_ = make_padding_mask(src, model_->config().pad_id);  // [B, 1, 1, S]
  memory_ = model_->encode(src, src_mask_);                     // [B, S, D]
  if (use_cache_) {
    cache_ = model_->start_cache(memory_, src_mask_);
    memory_ = at::Tensor();  // the cache holds the projected K/V; free the rest
  } else {
    prefix_ = torch::empty({src.size(0), 0}, src.options());
  }
}

void TransformerDecoder::join(const at::Tensor& src) {
  if (!use_cache_) IncrementalDecoder::join(src);  // throws
  torch::NoGradGuard no_grad;
  auto mask = make_padding_mask(src, model_->config().pad_id);   // [n, 1, 1, S]
  cache_.append(model_->start_cache(model_->encode(src, mask), mask));
  rows_ += src.size(0);
  restriction_.add_rows(src.size(0));
  restricted_out_ = nullptr;  // an unrestricted row needs every column
}

void TransformerDecoder::restrict_output(const std::vector<const std::vector<int64_t>*>& vocabularies) {
  restriction_.restrict_last(vocabularies, rows_, model_->fc_out->weight.size(0), device());
  restricted_out_ = nullptr;
  restricted_output();  // prepared here, not at the first step
}

const torch::nn::Linear& TransformerDecoder::restricted_output() {
  if (restricted_out_) return restricted_out_;
  const at::Tensor& columns = restriction_.columns();
  if (columns.size(0) == model_->fc_out->weight.size(0)) return restricted_out_ = model_->fc_out;  // a row keeps every column
  return restricted_out_ = restricted_made_->get(model_->fc_out, columns);
}

at::Tensor TransformerDecoder::restricted_logits(const at::Tensor& hidden) {
  auto logits = apply_linear(restricted_output(), hidden).to(torch::kFloat);  // [N, U]
  const at::Tensor& blocked = restriction_.blocked_columns();                 // [N, U]; undefined: none
  return blocked.defined() ? logits.masked_fill_(blocked, -std::numeric_limits<float>::infinity()) : logits;
}

at::Tensor TransformerDecoder::step(const at::Tensor& last_tokens) {
  torch::NoGradGuard no_grad;
  at::Tensor logits;
  if (use_cache_ && restriction_.active())
    return log_probabilities(restricted_logits(model_->decode_step_hidden(last_tokens, cache_)));  // [N, U]
  if (use_cache_) {
    logits = model_->decode_step(last_tokens, cache_);  // [N, V]
  } else {
    prefix_ = torch::cat({prefix_, last_tokens.unsqueeze(1)}, 1);  // [N, t]
    auto hidden = model_->decode(prefix_, memory_, src_mask_, make_causal_mask(prefix_.size(1), prefix_.device()));
    logits = apply_linear(model_->fc_out, hidden.select(1, -1));  // [N, V]
  }
  return restriction_.apply(log_probabilities(logits));
}

at::Tensor TransformerDecoder::output_columns() const {
  return use_cache_ && restriction_.active() ? restriction_.columns() : at::Tensor();
}

at::Tensor TransformerDecoder::step_hidden(const at::Tensor& last_tokens) {
  if (!use_cache_) throw std::logic_error("step_hidden needs the decoder's cache");
  torch::NoGradGuard no_grad;
  return model_->decode_step_hidden(last_tokens, cache_);  // [N, D]
}

at::Tensor projection_log_probs(const torch::nn::Linear& out, const at::Tensor& hidden) {
  torch::NoGradGuard no_grad;
  return log_probabilities(apply_linear(out, hidden));  // [N, V]
}

at::Tensor projection_greedy_tokens(const torch::nn::Linear& out, const at::Tensor& hidden, const at::Tensor& blocked) {
  torch::NoGradGuard no_grad;
  const bool restricted = blocked.defined();
  // Rows in full: their projection's top-1 (under a shortlist, into its open columns), as step() +
  // row_top_k (the logits' argmax is the log-probabilities').
  auto top1 = [&](const at::Tensor& rows) {
    if (restricted)  // [N, 1], all rows
      return kernels::row_top_k(apply_linear(out, rows).to(torch::kFloat), 1, blocked).second;
    return kernels::row_top_k(log_probabilities(apply_linear(out, rows)), 1).second;  // [n, 1]
  };
  auto tokens = restricted ? try_linear_argmax(out, hidden, blocked) : try_linear_argmax(out, hidden);
  if (tokens.empty()) return top1(hidden).view({-1});
  // Rows the screen left open: computed as step() computes them. Up to kSmallBatchLinearMaxRows
  // rows the kernel gives a row the same logits in any batch of few rows, so the open rows alone;
  // beyond, a GEMM's rounding may depend on the rows it is given, so all of them.
  std::vector<int64_t> open;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0) open.push_back(static_cast<int64_t>(i));
  if (!open.empty()) {
    // (The shortlist's mask is for all rows: its rows are computed together.)
    const bool few = hidden.size(0) <= kernels::kSmallBatchLinearMaxRows && !restricted;
    const auto top = (few ? top1(hidden.index_select(0, torch::tensor(open, torch::kLong))) : top1(hidden)).contiguous();
    for (size_t i = 0; i < open.size(); ++i)
      tokens[static_cast<size_t>(open[i])] = top.data_ptr<int64_t>()[few ? i : static_cast<size_t>(open[i])];
  }
  return torch::tensor(tokens, torch::kLong);  // [N], CPU (the screen runs only there)
}

IncrementalDecoder::TopK projection_top_k(const torch::nn::Linear& out, const at::Tensor& hidden, int64_t width,
                                          const std::vector<int64_t>& extra_columns) {
  torch::NoGradGuard no_grad;
  auto full = [&](const at::Tensor& rows, int64_t w) {
    return IncrementalDecoder::top_k_of(log_probabilities(apply_linear(out, rows)), w, extra_columns);
  };
  const int64_t columns = out->weight.size(0);
  const int64_t w = std::min(width, columns);
  auto screened = try_linear_log_softmax_top_k(out, hidden, w, extra_columns);
  if (!screened) return full(hidden, width);
  IncrementalDecoder::TopK top{screened->values, screened->indices, screened->extra, columns};
  if (!screened->open.empty()) {
    const auto open = torch::tensor(screened->open, torch::kLong);  // [n]
    const auto rows = full(hidden.index_select(0, open.to(hidden.device())), w);
    top.values.index_copy_(0, open, rows.values);
    top.indices.index_copy_(0, open, rows.indices);
    top.extra.index_copy_(0, open, rows.extra);
  }
  return top;
}

at::Tensor TransformerDecoder::greedy_tokens(const at::Tensor& last_tokens) {
  if (!use_cache_) return IncrementalDecoder::greedy_tokens(last_tokens);
  const auto hidden = step_hidden(last_tokens);  // [N, D]
  if (!restriction_.active()) return projection_greedy_tokens(model_->fc_out, hidden);
  const auto best = projection_greedy_tokens(restricted_output(), hidden, restriction_.blocked_columns());  // [N]
  return restriction_.columns().index_select(0, best.to(restriction_.columns().device()));
}

IncrementalDecoder::TopK TransformerDecoder::step_top_k(const at::Tensor& last_tokens, int64_t width,
                                                        const std::vector<int64_t>& extra_columns) {
  // A list every row shares is a smaller output layer: screened as the whole one is.
  if (!use_cache_ || (restriction_.active() && !restriction_.shared()))
    return IncrementalDecoder::step_top_k(last_tokens, width, extra_columns);
  const auto& out = restriction_.active() ? restricted_output() : model_->fc_out;
  return projection_top_k(out, step_hidden(last_tokens), width, extra_columns);
}

void TransformerDecoder::select(const at::Tensor& index) {
  rows_ = index.size(0);
  restriction_.select(index);
  if (use_cache_) {
    cache_.select(index);
  } else {
    memory_ = memory_.index_select(0, index);
    src_mask_ = src_mask_.index_select(0, index);
    prefix_ = prefix_.index_select(0, index);
  }
}

void TransformerDecoder::expand_rows(int64_t rows, int64_t k) {
  if (use_cache_) {
    rows_ = rows * k;
    restriction_.expand(k);
    cache_.expand(k);  // the beams share their sentence's cross-attention K/V
  } else {
    IncrementalDecoder::expand_rows(rows, k);  // a select
  }
}

void TransformerDecoder::reorder_within_sentences(const at::Tensor& index) {
  // No restriction_.select: a sentence's rows share its list (expand_rows), so a reorder within
  // sentences leaves every row's list as it was.
  if (use_cache_) {
    cache_.select_target_side(index);
  } else {
    prefix_ = prefix_.index_select(0, index);  // memory and mask rows stay with their sentence
  }
}

}  // namespace torchmt
