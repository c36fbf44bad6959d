#include "torchmt/model/moe_layer.h"

#include <stdexcept>

#include <torch/torch.h>

#include "model/linear.h"

namespace torchmt {

MoELayerImpl::MoELayerImpl(const MoELayerOptions& options_) : options(options_) { reset(); }

void MoELayerImpl::reset() {
  if (options.num_experts() < 1 || options.top_k() < 1 || options.top_k() > options.num_experts())
    throw std::invalid_argument("a mixture of experts needs 1 <= top_k <= experts");
  top_k = options.top_k();
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < options.num_experts(); ++e)
    experts->push_back(FeedForward(FeedForwardOptions(options.embed_dim(), options.ff_dim())
                                       .dropout(options.dropout())
                                       .activation(options.activation())));
  gate = register_module("gate", make_linear(options.embed_dim(), options.num_experts()));
}

torch::Tensor MoELayerImpl::forward(const torch::Tensor& x) {
  const int64_t d = x.size(-1), n_experts = options.num_experts();
  const auto flat = x.reshape({-1, d});                                // [N, D]
  const auto probs = torch::softmax(apply_linear(gate, flat).to(torch::kFloat), -1);  // [N, E]
  auto [weights, chosen] = probs.topk(top_k, -1);                      // [N, k] each
  auto out = torch::zeros_like(flat);                                  // [N, D]
  tokens_per_expert.assign(static_cast<size_t>(n_experts), 0);
  // One pass over the choices: the (token, slot) pairs of each expert, grouped by expert.
  const auto flat_choice = chosen.reshape({-1});                       // [N*k]
  const auto order = flat_choice.argsort();                            // pairs by expert
  const auto counts = torch::bincount(flat_choice, {}, n_experts).cpu();  // [E]
  const auto* count = counts.data_ptr<int64_t>();
  int64_t begin = 0;
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t m = count[e];
    tokens_per_expert[static_cast<size_t>(e)] = m;
    if (m == 0) continue;
    const auto pairs = order.narrow(0, begin, m);                      // [m] indices into N*k
    begin += m;
    const auto tokens = pairs.div(top_k, "floor");                     // [m] rows of flat
    auto y = experts[e]->as<FeedForward>()->forward(flat.index_select(0, tokens));  // [m, D]
    const auto w = weights.reshape({-1}).index_select(0, pairs).unsqueeze(1);       // [m, 1]
    out.index_add_(0, tokens, (y * w).to(out.scalar_type()));
  }
  // Load-balancing loss: f from the routing counts (no gradient), P from the probabilities.
  const auto share = counts.to(probs.device(), torch::kFloat) / static_cast<double>(flat.size(0) * top_k);  // [E]
  aux_loss = (share * probs.mean(0)).sum() * static_cast<double>(n_experts);
  return out.view(x.sizes());
}

}  // namespace torchmt
