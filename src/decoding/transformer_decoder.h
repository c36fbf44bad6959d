#pragma once
// IncrementalDecoder over a torchmt Transformer. With the cache (default) each step runs
// the decoder on the newest position only, reading past self-attention K/V and the
// once-computed cross-attention K/V from an explicit DecoderCache. Without it, each step
// recomputes the whole prefix (the reference behaviour; kept for tests and benchmarks).
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "torchmt/decoding/incremental_decoder.h"
#include "decoding/output_restriction.h"
#include "torchmt/model/kv_cache.h"
#include "torchmt/model/transformer.h"

namespace torchmt {

// Output layers over some rows of a model's fc_out (select_output_rows), by their columns, shared
// by the decoders of one translator: every batch of a --both-directions model or of one with closed
// columns keeps to one of a few lists (OutputLanguages), which each worker and call would otherwise
// select and prepare again. The last kKept made are kept; a layer whose weights have changed since
// (the trainer's model between validations) is made again.
class RestrictedOutputs {
 public:
  static constexpr size_t kKept = 4;
  torch::nn::Linear get(const torch::nn::Linear& whole, const at::Tensor& columns);

 private:
  struct Made {
    at::Tensor columns;
    uint32_t weight_version, bias_version;  // the whole layer's when made
    torch::nn::Linear layer;
  };
  std::mutex mutex_;
  std::vector<Made> made_;  // most recently used last
};

class TransformerDecoder : public IncrementalDecoder {
 public:
  // `outputs`: restricted output layers shared with other decoders of the model (null: its own).
  explicit TransformerDecoder(Transformer model, bool use_cache = true,
                              std::shared_ptr<RestrictedOutputs> outputs = nullptr);
  void start(const at::Tensor& src) override;
  at::Tensor step(const at::Tensor& last_tokens) override;
  // On the CPU in fp32, the output projection screened (src/kernels/primitives.h): the
  // same tokens as step()'s top-1 without computing most logits in fp32.
  at::Tensor greedy_tokens(const at::Tensor& last_tokens) override;
  // step()'s best entries through the output projection's screen (CPU, fp32), rows it leaves open
  // as step() computes them.
  TopK step_top_k(const at::Tensor& last_tokens, int64_t width, const std::vector<int64_t>& extra_columns) override;
  void select(const at::Tensor& index) override;
  void expand_rows(int64_t rows, int64_t k) override;
  void reorder_within_sentences(const at::Tensor& index) override;
  bool can_join() const override { return use_cache_; }  // the cache holds per-row positions
  void join(const at::Tensor& src) override;
  // Under a shortlist the output projection computes only the columns some row may produce.
  void restrict_output(const std::vector<const std::vector<int64_t>*>& vocabularies) override;
  at::Tensor output_columns() const override;
  at::Device device() const override;
  // The decoder's last hidden states [N, D] for the next tokens, before the output projection
  // (an ensemble projects its members' together); advances the cache as step() does. Cache only.
  at::Tensor step_hidden(const at::Tensor& last_tokens);
  const OutputRestriction& restriction() const { return restriction_; }

 private:
  Transformer model_;
  bool use_cache_;
  DecoderCache cache_;
  // No-cache mode state.
  at::Tensor memory_, src_mask_, prefix_;
  int64_t rows_ = 0;
  OutputRestriction restriction_;
  torch::nn::Linear restricted_out_{nullptr};  // fc_out's rows restriction_.columns(), made when first needed
  std::shared_ptr<RestrictedOutputs> restricted_made_;
  const torch::nn::Linear& restricted_output();
  // Hidden states [N, D] -> logits [N, U] over restriction_.columns(), -inf where a row may not go.
  at::Tensor restricted_logits(const at::Tensor& hidden);
};

// An output projection's step over hidden states [N, D] as TransformerDecoder takes it (CPU fp32:
// through the layer's screen where it is prepared with one): log-probabilities [N, V]; each row's
// most probable output ([N] int64; `blocked` [N, V] bool, optional: outputs a row may not
// produce); beam search's top entries.
at::Tensor projection_log_probs(const torch::nn::Linear& out, const at::Tensor& hidden);
at::Tensor projection_greedy_tokens(const torch::nn::Linear& out, const at::Tensor& hidden,
                                    const at::Tensor& blocked = {});
IncrementalDecoder::TopK projection_top_k(const torch::nn::Linear& out, const at::Tensor& hidden, int64_t width,
                                          const std::vector<int64_t>& extra_columns);

}  // namespace torchmt
