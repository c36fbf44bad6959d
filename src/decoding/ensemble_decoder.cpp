#include "decoding/ensemble_decoder.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

#include "decoding/transformer_decoder.h"
#include "torchmt/decoding/translator.h"
#include "model/linear.h"

namespace torchmt {

EnsembleDecoder::EnsembleDecoder(std::vector<std::unique_ptr<IncrementalDecoder>> members,
                                 std::vector<double> weights, torch::nn::Linear stacked,
                                 std::shared_ptr<RestrictedOutputs> outputs)
    : members_(std::move(members)),
      weights_(std::move(weights)),
      stacked_(std::move(stacked)),
      outputs_(outputs ? std::move(outputs) : std::make_shared<RestrictedOutputs>()) {
  if (!stacked_.is_empty())
    for (const auto& m : members_) {
      const auto* t = dynamic_cast<const TransformerDecoder*>(m.get());
      if (!t || !t->can_join())
        throw std::invalid_argument("a stacked output projection needs cached TransformerDecoder members");
    }
  if (members_.empty() || weights_.size() != members_.size())
    throw std::invalid_argument("an ensemble of " + std::to_string(members_.size()) + " models with " +
                                std::to_string(weights_.size()) + " weights");
  double total = 0.0;
  for (double w : weights_) total += w;
  for (double& w : weights_) w /= total;
}

void EnsembleDecoder::start(const at::Tensor& src) {
  restricted_ = false;
  projection_ = nullptr;
  for (auto& m : members_) m->start(src);
}

const OutputRestriction& EnsembleDecoder::restriction() const {
  return static_cast<const TransformerDecoder&>(*members_.front()).restriction();
}

const torch::nn::Linear* EnsembleDecoder::stacked_projection() {
  if (stacked_.is_empty()) return nullptr;
  if (!restricted_) return &stacked_;
  if (!restriction().shared()) return nullptr;
  if (projection_.is_empty()) projection_ = outputs_->get(stacked_, restriction().columns());
  return &projection_;
}

at::Tensor EnsembleDecoder::stacked_hidden(const at::Tensor& last_tokens) {
  std::vector<at::Tensor> hidden;
  for (auto& m : members_) hidden.push_back(static_cast<TransformerDecoder&>(*m).step_hidden(last_tokens));  // [N, D_i]
  return at::cat(hidden, 1);  // [N, sum D_i]
}

at::Tensor EnsembleDecoder::greedy_tokens(const at::Tensor& last_tokens) {
  const auto* out = stacked_projection();
  if (!out) return IncrementalDecoder::greedy_tokens(last_tokens);
  const auto best = projection_greedy_tokens(*out, stacked_hidden(last_tokens));  // [N], columns of *out
  if (!restricted_) return best;
  const at::Tensor& columns = restriction().columns();
  return columns.index_select(0, best.to(columns.device()));  // tokens
}

IncrementalDecoder::TopK EnsembleDecoder::step_top_k(const at::Tensor& last_tokens, int64_t width,
                                                     const std::vector<int64_t>& extra_columns) {
  const auto* out = stacked_projection();
  if (!out) return IncrementalDecoder::step_top_k(last_tokens, width, extra_columns);
  return projection_top_k(*out, stacked_hidden(last_tokens), width, extra_columns);
}

at::Tensor EnsembleDecoder::step(const at::Tensor& last_tokens) {
  // log_softmax(sum w_i log_softmax(z_i)) = log_softmax(sum w_i z_i): each member's normaliser is a
  // per-row constant, so the stacked layer's logits give the same distribution.
  if (const auto* out = stacked_projection()) return projection_log_probs(*out, stacked_hidden(last_tokens));
  at::Tensor mixed;  // [N, C]: the weighted mean of the members' log-probabilities
  for (size_t i = 0; i < members_.size(); ++i) {
    at::Tensor lp = members_[i]->step(last_tokens);  // [N, C] float32
    if (i == 0) mixed = lp.mul(weights_[0]);
    else mixed.add_(lp, weights_[i]);
  }
  // Renormalised, so that scores stay log-probabilities (n-best, scoring, confidence). Columns a
  // shortlist closes are -inf in every member and stay so.
  return at::log_softmax(mixed, -1);
}

void EnsembleDecoder::select(const at::Tensor& index) {
  for (auto& m : members_) m->select(index);
}

void EnsembleDecoder::expand_rows(int64_t rows, int64_t k) {
  for (auto& m : members_) m->expand_rows(rows, k);
}

void EnsembleDecoder::reorder_within_sentences(const at::Tensor& index) {
  for (auto& m : members_) m->reorder_within_sentences(index);
}

bool EnsembleDecoder::can_join() const {
  return std::all_of(members_.begin(), members_.end(), [](const auto& m) { return m->can_join(); });
}

void EnsembleDecoder::join(const at::Tensor& src) {
  for (auto& m : members_) m->join(src);
  projection_ = nullptr;
}

void EnsembleDecoder::restrict_output(const std::vector<const std::vector<int64_t>*>& vocabularies) {
  for (auto& m : members_) m->restrict_output(vocabularies);
  for (const auto* v : vocabularies) restricted_ = restricted_ || (v && !v->empty());
  projection_ = nullptr;
}

std::vector<double> parse_ensemble_weights(const std::string& text, size_t members) {
  if (text.empty()) return std::vector<double>(members, 1.0);
  std::vector<double> weights;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    double w = 0.0;
    try {
      w = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(w > 0.0) || !std::isfinite(w))
      throw std::invalid_argument("--ensemble-weights: '" + item + "' is not a positive number");
    weights.push_back(w);
  }
  if (weights.size() != members)
    throw std::invalid_argument("--ensemble-weights gives " + std::to_string(weights.size()) + " weights for " +
                                std::to_string(members) + " models (-m)");
  return weights;
}

Translator make_ensemble_translator(std::vector<Translator> members, std::vector<double> weights,
                                    const std::vector<std::string>& names) {
  if (members.empty() || names.size() != members.size() || weights.size() != members.size())
    throw std::invalid_argument("an ensemble of " + std::to_string(members.size()) + " models, " +
                                std::to_string(names.size()) + " names and " + std::to_string(weights.size()) +
                                " weights");
  if (members.size() == 1) return std::move(members.front());
  const Translator& first = members.front();
  ModelConfig config = first.config();
  for (size_t i = 1; i < members.size(); ++i) {
    const Translator& m = members[i];
    auto refuse = [&](const std::string& what) {
      throw std::invalid_argument("ensemble: " + names[i] + " has another " + what + " than " + names[0] +
                                  " (the models of an ensemble must share their vocabularies)");
    };
    if (m.src_tokenizer().checksum() != first.src_tokenizer().checksum()) refuse("source vocabulary");
    if (m.tgt_tokenizer().checksum() != first.tgt_tokenizer().checksum()) refuse("target vocabulary");
    const ModelConfig& c = m.config();
    if (c.tgt_vocab_size != config.tgt_vocab_size || c.src_vocab_size != config.src_vocab_size)
      refuse("vocabulary size");
    if (c.special_ids() != config.special_ids()) refuse("set of special ids");
    // A joint vocabulary lets a model of the other direction pass the checks above.
    const ModelLanguages &a = first.languages(), &b = m.languages();
    if (!a.source.empty() && !b.source.empty() && (a.source != b.source || a.target != b.target))
      throw std::invalid_argument("ensemble: " + names[i] + " translates " + b.source + " to " + b.target + ", " +
                                  names[0] + " " + a.source + " to " + a.target);
    if (m.device() != first.device())
      throw std::invalid_argument("ensemble: " + names[i] + " is on " + m.device().str() + ", " + names[0] +
                                  " on " + first.device().str());
    config.max_positions = std::min(config.max_positions, c.max_positions);
  }
  // Native models: their output projections stacked once, here (packed and screened as theirs).
  // Normalised through the largest first: weights of 1e308 must not sum to inf.
  const double largest = *std::max_element(weights.begin(), weights.end());
  double total = 0.0;
  for (double w : weights) total += w / largest;
  for (double& w : weights) w = w / largest / total;  // the decoder's weights and the stacked layer's scales alike
  torch::nn::Linear stacked = nullptr;
  if (std::all_of(members.begin(), members.end(), [](Translator& m) { return static_cast<bool>(m.model()); })) {
    std::vector<torch::nn::Linear> outputs;
    for (auto& m : members) outputs.push_back(m.model()->fc_out);
    stacked = stack_linear_inputs(outputs, weights);
  }
  auto shared = std::make_shared<const std::vector<Translator>>(std::move(members));
  auto outputs = std::make_shared<RestrictedOutputs>();
  DecoderFactory factory = [shared, weights, stacked, outputs](bool use_cache) -> std::unique_ptr<IncrementalDecoder> {
    std::vector<std::unique_ptr<IncrementalDecoder>> decoders;
    for (const Translator& m : *shared) decoders.push_back(m.make_decoder(use_cache));
    return std::make_unique<EnsembleDecoder>(std::move(decoders), weights, use_cache ? stacked : nullptr, outputs);
  };
  const Translator& lead = shared->front();
  Translator ensemble(std::move(factory), config, lead.src_tokenizer(), lead.tgt_tokenizer(), lead.device(),
                      lead.dtype());
  if (lead.runtime()) ensemble.set_runtime(*lead.runtime());
  // Both directions only where every member knows both (serve's reverse pair, --reverse-weight).
  ModelLanguages languages = lead.languages();
  languages.both_directions = std::all_of(shared->begin(), shared->end(),
                                          [](const Translator& m) { return m.languages().both_directions; });
  // Each way's columns only where every member keeps to the same ones.
  const bool same_columns = std::all_of(shared->begin(), shared->end(), [&](const Translator& m) {
    return m.languages().target_columns == languages.target_columns &&
           m.languages().source_columns == languages.source_columns;
  });
  if (!same_columns || !languages.both_directions) languages.target_columns = languages.source_columns = {};
  // Columns closed in every member stay closed: the ensemble computes the others.
  std::vector<int64_t> open;
  for (const Translator& m : *shared) {
    const std::vector<int64_t>& some = m.open_output_columns();
    if (some.empty()) {  // a member with every column open
      open.clear();
      break;
    }
    std::vector<int64_t> both;
    std::set_union(open.begin(), open.end(), some.begin(), some.end(), std::back_inserter(both));
    open = std::move(both);
  }
  ensemble.set_open_output_columns(std::move(open));
  ensemble.set_languages(std::move(languages));
  if (lead.precision_name() == "int8") ensemble.set_precision_name("int8");  // the members' Linear layers
  return ensemble;
}

}  // namespace torchmt
