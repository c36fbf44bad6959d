#pragma once
// Ensembles (fairseq's EnsembleModel, Marian's and OpenNMT-py's -m a -m b): several models of one
// vocabulary decode as one. At every step each member scores the rows and the ensemble's
// log-probabilities are the weighted mean of the members', renormalised (a product of experts):
// greedy, beam, prefixes, constraints, shortlists and n-best run over it unchanged, and
// forced decoding (Translator::score) scores a hypothesis as the search scored it.
#include <memory>
#include <vector>

#include <torch/nn/modules/linear.h>

#include "torchmt/decoding/incremental_decoder.h"

namespace torchmt {

class OutputRestriction;
class RestrictedOutputs;
class Translator;

class EnsembleDecoder : public IncrementalDecoder {
 public:
  // `weights`: one per member, positive; normalised to sum to 1 here. `stacked` (optional): the
  // members' output projections as one layer over their concatenated hidden states, weighted
  // (stack_linear_inputs), when every member is a cached TransformerDecoder: then a step projects
  // once, through that layer's screen, instead of once per member; under a list every row shares
  // (OutputRestriction::shared), through its rows of that list, made by `outputs` (null: its own).
  EnsembleDecoder(std::vector<std::unique_ptr<IncrementalDecoder>> members, std::vector<double> weights,
                  torch::nn::Linear stacked = nullptr, std::shared_ptr<RestrictedOutputs> outputs = nullptr);
  void start(const at::Tensor& src) override;
  at::Tensor step(const at::Tensor& last_tokens) override;
  at::Tensor greedy_tokens(const at::Tensor& last_tokens) override;
  TopK step_top_k(const at::Tensor& last_tokens, int64_t width, const std::vector<int64_t>& extra_columns) override;
  at::Tensor output_columns() const override { return members_.front()->output_columns(); }
  void select(const at::Tensor& index) override;
  void expand_rows(int64_t rows, int64_t k) override;
  void reorder_within_sentences(const at::Tensor& index) override;
  bool can_join() const override;
  void join(const at::Tensor& src) override;
  void restrict_output(const std::vector<const std::vector<int64_t>*>& vocabularies) override;
  at::Device device() const override { return members_.front()->device(); }

 private:
  std::vector<std::unique_ptr<IncrementalDecoder>> members_;
  std::vector<double> weights_;
  torch::nn::Linear stacked_{nullptr};
  std::shared_ptr<RestrictedOutputs> outputs_;
  bool restricted_ = false;  // a shortlist or the models' columns: the members restrict their rows
  torch::nn::Linear projection_{nullptr};  // this batch's stacked projection, made when first needed
  // The stacked layer a step projects through: the whole one, its rows of a list every row shares,
  // or null (rows with lists of their own: each member projects its own columns).
  const torch::nn::Linear* stacked_projection();
  // The lead member's restriction (every member has the same: restrict_output gives each the lists).
  const OutputRestriction& restriction() const;
  // The members' hidden states side by side [N, sum D].
  at::Tensor stacked_hidden(const at::Tensor& last_tokens);
};

// The weights of --ensemble-weights ("0.5,0.5"): `members` positive numbers, or all equal when
// `text` is empty. std::invalid_argument naming the flag otherwise.
std::vector<double> parse_ensemble_weights(const std::string& text, size_t members);

// One Translator over the members (loaded and prepared as single models): the first member's
// tokenizers, device, precision, runtime and threads. The members must share the source and the
// target vocabulary and the special ids (std::invalid_argument naming the two models otherwise);
// `names` (the models' paths) name them in errors.
Translator make_ensemble_translator(std::vector<Translator> members, std::vector<double> weights,
                                    const std::vector<std::string>& names);

}  // namespace torchmt
