#include "torchmt/model/transformer.h"

#include <cmath>
#include <unordered_set>

#include <torch/torch.h>

#include "model/activation_checkpoint.h"
#include "model/add_layer_norm.h"
#include "model/linear.h"

#include "model/masks.h"
#include "torchmt/util/device.h"

namespace torchmt {
namespace {

// LibTorch keeps parameters in Module's protected dict and offers no supported way to make
// a registered parameter share another's tensor: register_parameter refuses a name that
// exists (OrderedDict::insert throws), there is no unregister_parameter, and while
// EmbeddingOptions::_weight could build an embedding over a given tensor, LinearOptions has
// no such option for fc_out (checked against LibTorch 2.1-2.13). A pointer-to-member taken
// through a derived class reaches the dict legally, so several modules hold one tensor under
// their own names (tied embeddings), as the reference model's state dict has them.
struct ParameterSlot : torch::nn::Module {
  static void replace(torch::nn::Module& module, const std::string& name, const torch::Tensor& tensor) {
    auto member = &ParameterSlot::parameters_;
    (module.*member)[name] = tensor;
  }
};

}  // namespace

TransformerImpl::TransformerImpl(const ModelConfig& config) : config_(config) {
  config_.validate();
  reset();
}

void TransformerImpl::reset() {
  const ModelConfig& c = config_;
  embed_scale_ = c.scale_embeddings ? std::sqrt(static_cast<double>(c.d_model)) : 1.0;
  const bool initialize = !SkipParameterInit::active();
  auto embedding = [&](int64_t vocab) {
    auto options = torch::nn::EmbeddingOptions(vocab, c.d_model);
    if (!initialize) options._weight(torch::empty({vocab, c.d_model}));  // taken as it is, not drawn
    return torch::nn::Embedding(options);
  };
  src_embedding = register_module("src_embedding", embedding(c.src_vocab_size));
  tgt_embedding = register_module("tgt_embedding", embedding(c.tgt_vocab_size));
  pos_encoding = register_module("pos_encoding", PositionalEncoding(PositionalEncodingOptions(c.d_model, c.max_positions)
                                                                       .dropout(c.dropout)
                                                                       .kind(c.positions)
                                                                       .head_dim(c.d_model / c.num_heads)));
  auto layer_options = TransformerLayerOptions(c.d_model, c.num_heads, c.d_ff)
                           .dropout(c.dropout)
                           .activation(c.activation)
                           .norm(c.norm)
                           .kv_heads(c.key_value_heads())
                           .experts(c.ffn == Ffn::kMoe ? c.experts : 0)
                           .top_k(c.top_k);
  encoder_layers = register_module("encoder_layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_encoder_layers; ++i) encoder_layers->push_back(TransformerEncoderLayer(layer_options));
  decoder_layers = register_module("decoder_layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_decoder_layers; ++i) decoder_layers->push_back(TransformerDecoderLayer(layer_options));
  fc_out = register_module("fc_out", make_linear(c.d_model, c.tgt_vocab_size));
  if (c.norm == Norm::kPre) {
    encoder_norm = register_module("encoder_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
    decoder_norm = register_module("decoder_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  }

  if (initialize) reset_parameters();
  if (c.tie_embeddings) tie_embeddings();
}

void TransformerImpl::reset_parameters() {
  // Initialisation for training from scratch, chosen by module type (as LibTorch's own
  // modules do in reset_parameters): N(0, d^-1/2) for embeddings so that the sqrt(d) scaling
  // gives unit-variance inputs (fairseq, T2T); Xavier for linear weights, zero biases;
  // LayerNorm keeps its ones/zeros. Modules are visited in registration order, so the random
  // draws are those of the parameter order (a seed gives the same model as before).
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* embedding = module->as<torch::nn::Embedding>()) {
      torch::nn::init::normal_(embedding->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(config_.d_model)));
    } else if (auto* linear = module->as<torch::nn::Linear>()) {
      torch::nn::init::xavier_uniform_(linear->weight);
      if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
    } else if (auto* positions = module->as<PositionalEncoding>()) {
      positions->reset_parameters();  // a learned table; nothing for the others
    }
  }
}

void TransformerImpl::tie_embeddings() {
  // fc_out.weight [V, D] and the embeddings [V, D] share one tensor.
  torch::Tensor shared = src_embedding->weight;
  tgt_embedding->weight = shared;
  ParameterSlot::replace(*tgt_embedding, "weight", shared);
  fc_out->weight = shared;
  ParameterSlot::replace(*fc_out, "weight", shared);
}

namespace {

// One layer under checkpoint(). A mixture's load-balancing loss leaves the layer as a second
// output: computed in the gradient-free checkpointed forward it would train nothing, so the
// layer's `aux_loss` is replaced by the output that autograd connects to the recomputation.
torch::Tensor recomputed(MoELayer moe, std::function<torch::Tensor(const std::vector<at::Tensor>&)> layer_forward,
                         const std::vector<at::Tensor>& inputs) {
  auto outputs = checkpoint([moe, layer_forward](const std::vector<at::Tensor>& in) {
    std::vector<at::Tensor> out{layer_forward(in)};
    if (moe) out.push_back(moe->aux_loss);
    return out;
  }, inputs);
  if (moe) moe->aux_loss = outputs[1];
  return outputs[0];
}

// Training under CPU autocast runs the residual stream in the autocast dtype: CPU LayerNorm
// computes in fp32 inside and returns its input's dtype, so an fp32 stream made every sublayer
// output be cast up for the residual add and every LayerNorm output cast down for the next
// linear, in forward and backward. (CUDA autocast runs LayerNorm in fp32 whatever comes in;
// inference keeps its numerics.)
torch::Tensor in_stream_dtype(const torch::Tensor& embedded, bool training) {
  if (!training || !embedded.is_cpu()) return embedded;
  const auto dtype = active_autocast_dtype(embedded.device());
  return dtype == c10::ScalarType::Float ? embedded : embedded.to(dtype);
}

}  // namespace

torch::Tensor TransformerImpl::encode(const torch::Tensor& src, const torch::Tensor& src_mask) {
  auto embedded = src_embedding(src) * embed_scale_;  // [B, S, D]
  auto x = pos_encoding(in_stream_dtype(embedded, is_training()));
  RotaryTables rotary;
  // The rotation tables keep the embeddings' dtype (fp32 under autocast), as before the stream's cast.
  std::tie(rotary.cos, rotary.sin) = pos_encoding->rotary(0, x.size(1), embedded.scalar_type());
  const bool recompute = config_.checkpoint_activations && is_training() && torch::GradMode::is_enabled();
  for (auto& module : *encoder_layers) {
    TransformerEncoderLayer layer(std::dynamic_pointer_cast<TransformerEncoderLayerImpl>(module));
    if (recompute) {
      // Captured by value: backward calls it again after encode() has returned.
      x = recomputed(layer->ffn.moe, [layer, src_mask, rotary](const std::vector<at::Tensor>& in) mutable {
        return layer->forward(in[0], src_mask, rotary);
      }, {x});
    } else {
      x = layer->forward(x, src_mask, rotary);
    }
  }
  return encoder_norm ? layer_norm(encoder_norm, x) : x;
}

torch::Tensor TransformerImpl::decode(const torch::Tensor& tgt, const torch::Tensor& memory,
                                      const torch::Tensor& src_mask, const torch::Tensor& tgt_mask,
                                      std::vector<torch::Tensor>* cross_weights) {
  auto embedded = tgt_embedding(tgt) * embed_scale_;  // [B, T, D]
  auto x = pos_encoding(in_stream_dtype(embedded, is_training()));
  RotaryTables rotary;
  std::tie(rotary.cos, rotary.sin) = pos_encoding->rotary(0, x.size(1), embedded.scalar_type());
  const bool recompute =
      config_.checkpoint_activations && is_training() && torch::GradMode::is_enabled() && !cross_weights;
  for (auto& module : *decoder_layers) {
    TransformerDecoderLayer layer(std::dynamic_pointer_cast<TransformerDecoderLayerImpl>(module));
    if (recompute) {
      x = recomputed(layer->ffn.moe, [layer, src_mask, tgt_mask, rotary](const std::vector<at::Tensor>& in) mutable {
        return layer->forward(in[0], in[1], src_mask, tgt_mask, nullptr, rotary);
      }, {x, memory});
      continue;
    }
    torch::Tensor weights;
    x = layer->forward(x, memory, src_mask, tgt_mask, cross_weights ? &weights : nullptr, rotary);
    if (cross_weights) cross_weights->push_back(weights);
  }
  return decoder_norm ? layer_norm(decoder_norm, x) : x;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& src, const torch::Tensor& tgt,
                                       const torch::Tensor& src_mask, const torch::Tensor& tgt_mask) {
  auto memory = encode(src, src_mask);
  return apply_linear(fc_out, decode(tgt, memory, src_mask, tgt_mask));
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& src, const torch::Tensor& tgt) {
  return forward(src, tgt, make_padding_mask(src, config_.pad_id), make_target_mask(tgt, config_.pad_id));
}

torch::Tensor TransformerImpl::forward_columns(const torch::Tensor& src, const torch::Tensor& tgt,
                                               const torch::Tensor& columns) {
  const auto src_mask = make_padding_mask(src, config_.pad_id);
  auto hidden = decode(tgt, encode(src, src_mask), src_mask, make_target_mask(tgt, config_.pad_id));  // [B, T, D]
  return torch::linear(hidden, fc_out->weight.index_select(0, columns),  // [C, D]
                       fc_out->bias.defined() ? fc_out->bias.index_select(0, columns) : torch::Tensor());
}

void TransformerImpl::close_output_columns(const torch::Tensor& open) {
  TORCH_CHECK(open.dim() == 1 && open.size(0) == config_.tgt_vocab_size && open.scalar_type() == torch::kBool,
              "close_output_columns takes a [", config_.tgt_vocab_size, "] bool tensor");
  if (!fc_out->bias.defined()) return;
  torch::NoGradGuard no_grad;
  auto& bias = fc_out->bias;
  const auto is_open = open.to(bias.device());
  const auto was_closed = open_output_columns().logical_not().to(bias.device());
  bias.masked_fill_(is_open & was_closed, 0.0);
  bias.masked_fill_(is_open.logical_not(), kClosedColumnBias);
}

std::vector<int64_t> column_ids(const torch::Tensor& mask) {
  const torch::Tensor ids = mask.to(torch::kCPU).nonzero().flatten().contiguous();  // [C] ascending
  return {ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()};
}

torch::Tensor TransformerImpl::open_output_columns() const {
  if (!fc_out->bias.defined()) return torch::ones({config_.tgt_vocab_size}, torch::kBool);
  return fc_out->bias.detach().gt(kClosedColumnBias / 10).to(torch::kCPU);
}

DecoderCache TransformerImpl::start_cache(const torch::Tensor& memory, const torch::Tensor& src_mask) {
  DecoderCache cache;
  cache.src_mask = without_empty_rows(src_mask);  // once, not at every step
  cache.layers.resize(decoder_layers->size());
  for (size_t i = 0; i < decoder_layers->size(); ++i)
    decoder_layers[i]->as<TransformerDecoderLayer>()->prepare_cache(memory, cache.layers[i]);
  return cache;
}

torch::Tensor TransformerImpl::decode_step(const torch::Tensor& last_tokens, DecoderCache& cache) {
  return apply_linear(fc_out, decode_step_hidden(last_tokens, cache));  // [B, V]
}

torch::Tensor TransformerImpl::decode_step_hidden(const torch::Tensor& last_tokens, DecoderCache& cache) {
  auto embedded = tgt_embedding(last_tokens.unsqueeze(1)) * embed_scale_;  // [B, 1, D]
  torch::Tensor x, self_mask;
  RotaryTables rotary;
  if (cache.ragged()) {
    // Rows that joined later sit at earlier positions and see only their own columns.
    pos_encoding->check_positions(cache.length + 1);  // every row's position is <= length
    auto positions = cache.length - cache.start;      // [B]
    x = pos_encoding->forward_at(embedded, positions);
    std::tie(rotary.cos, rotary.sin) = pos_encoding->rotary(positions, x.scalar_type());
    self_mask = (torch::arange(cache.length + 1, cache.start.options()) >= cache.start.unsqueeze(1))
                    .view({-1, 1, 1, cache.length + 1});  // [B, 1, 1, T + 1]
  } else {
    x = pos_encoding->forward(embedded, cache.length);
    std::tie(rotary.cos, rotary.sin) = pos_encoding->rotary(cache.length, 1, x.scalar_type());
  }
  for (size_t i = 0; i < decoder_layers->size(); ++i)
    x = decoder_layers[i]->as<TransformerDecoderLayer>()->forward_step(x, cache.layers[i], cache.src_mask, rotary,
                                                                        self_mask);
  cache.length += 1;
  if (decoder_norm) x = decoder_norm(x);
  return x.squeeze(1);  // [B, D]
}

torch::Tensor TransformerImpl::moe_aux_loss() const {
  torch::Tensor total;
  for (const auto& module : modules(/*include_self=*/false))
    if (const auto* moe = module->as<MoELayer>(); moe && moe->aux_loss.defined())
      total = total.defined() ? total + moe->aux_loss : moe->aux_loss;
  return total;
}

int64_t count_parameters(const Transformer& model) {
  std::unordered_set<const void*> seen;
  int64_t total = 0;
  for (const auto& p : model->parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) total += p.numel();
  }
  return total;
}

}  // namespace torchmt
