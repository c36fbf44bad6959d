#include "export/torchscript_exporter.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "torchmt/data/special_ids.h"
#include "torchmt/data/tokenizer.h"
#include "io/checkpoint.h"
#include "../kernels/primitives.h"
#include "util/atomic_file.h"
#include "util/integrity.h"
#include "torchmt/util/device.h"
#include "torchmt/util/flat_config.h"
#include "loading/script_call.h"
#include "torchscript_source.h"
#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

using torch::jit::Module;


// Builds the module tree. Module types are shared between instances of one kind (all
// encoder layers are one class), so each kind's methods are compiled once.
class ScriptBuilder {
 public:
  ScriptBuilder(c10::ScalarType dtype, bool int8)
      : cu_(std::make_shared<torch::jit::CompilationUnit>()), dtype_(dtype), int8_(int8) {}

  Module make(const std::string& kind) {
    auto it = types_.find(kind);
    Module m = it == types_.end() ? Module(c10::QualifiedName("__torch__.torchmt." + kind), cu_)
                                  : Module(cu_, it->second);
    types_.emplace(kind, m.type());
    m.register_attribute("training", c10::BoolType::get(), false);
    return m;
  }

  // Compiles `source` into the type of `m` the first time a module of this kind is defined.
  void define(Module& m, const std::string& kind, const std::string& source) {
    if (!defined_.insert(kind).second) return;
    try {
      m.define(source);
    } catch (const std::exception& e) {
      throw std::runtime_error("internal error compiling the TorchScript of " + kind + ": " + e.what());
    }
  }

  // Weights as stored: detached, in the export dtype; one stored tensor per native tensor
  // (tied embeddings stay one tensor under several names).
  at::Tensor weight(const at::Tensor& t) {
    auto it = converted_.find(t.unsafeGetTensorImpl());
    if (it != converted_.end()) return it->second;
    auto out = t.detach().to(torch::kCPU, t.is_floating_point() ? dtype_ : t.scalar_type()).clone();
    converted_.emplace(t.unsafeGetTensorImpl(), out);
    return out;
  }

  // A module of `kind`: its children and weights in the native order and names, int/bool/
  // float attributes, and its TorchScript source (compiled once per kind).
  struct Attribute {
    std::string name;
    c10::TypePtr type;
    c10::IValue value;
  };
  Module build(const std::string& kind, const std::vector<std::pair<std::string, Module>>& children,
               const std::vector<std::pair<std::string, at::Tensor>>& parameters, const std::vector<Attribute>& attributes,
               const std::string& source, const std::vector<std::pair<std::string, at::Tensor>>& buffers = {}) {
    Module m = make(kind);
    for (const auto& [name, child] : children) m.register_module(name, child);
    for (const auto& [name, tensor] : buffers) m.register_buffer(name, tensor);  // stored as given
    for (const auto& [name, tensor] : parameters) m.register_parameter(name, weight(tensor), false);
    for (const auto& a : attributes) m.register_attribute(a.name, a.type, a.value);
    define(m, kind, source);
    return m;
  }

  // int8: {q [out, in], inverse scale [out]} of a weight, once per native tensor (tied weights
  // stay one pair).
  std::pair<at::Tensor, at::Tensor> quantized(const at::Tensor& t) {
    auto it = quantized_.find(t.unsafeGetTensorImpl());
    if (it != quantized_.end()) return it->second;
    auto q = kernels::quantize_rows_int8(t);
    quantized_.emplace(t.unsafeGetTensorImpl(), q);
    return q;
  }

  // A module of an int8 kind: weight and weight_scale as buffers, the rest as parameters.
  Module build_int8(const std::string& kind, const at::Tensor& weight_tensor,
                    const std::vector<std::pair<std::string, at::Tensor>>& parameters, const std::string& source) {
    auto [q, scale] = quantized(weight_tensor);
    return build(kind, {}, parameters, {}, source, {{"weight", q}, {"weight_scale", scale}});
  }

  Module linear(const torch::nn::Linear& l) {
    if (int8_) return build_int8("Int8Linear", l->weight, {{"bias", l->bias}}, ts_source::kInt8Linear);
    return build("Linear", {}, {{"weight", l->weight}, {"bias", l->bias}}, {}, ts_source::kLinear);
  }

  Module layer_norm(const torch::nn::LayerNorm& l) {
    return build("LayerNorm", {}, {{"weight", l->weight}, {"bias", l->bias}}, {}, ts_source::kLayerNorm);
  }

  Module embedding(const torch::nn::Embedding& e) {
    if (int8_) return build_int8("Int8Embedding", e->weight, {}, ts_source::kInt8Embedding);
    return build("Embedding", {}, {{"weight", e->weight}}, {}, ts_source::kEmbedding);
  }

  // Buffers stay buffers and parameters parameters, as in the native module.
  Module positional_encoding(const PositionalEncoding& p) {
    if (p->options.kind() == Positions::kRope) {
      Module m = make("RotaryPositionalEncoding");
      m.register_buffer("cos", weight(p->cos));
      m.register_buffer("sin", weight(p->sin));
      define(m, "RotaryPositionalEncoding", ts_source::kRotaryPositionalEncoding);
      return m;
    }
    Module m = make("PositionalEncoding");
    if (p->options.kind() == Positions::kLearned)
      m.register_parameter("pe", weight(p->pe), false);
    else
      m.register_buffer("pe", weight(p->pe));
    define(m, "PositionalEncoding", ts_source::kPositionalEncoding);
    return m;
  }

  Module attention(MultiHeadAttention& a) {
    const auto int_type = c10::IntType::get();
    // Grouped-query attention: the reference's GroupedQueryAttention names, in the module
    // tree and in the source.
    const bool g = a->grouped();
    static const std::string grouped_source = [] {
      std::string src = ts_source::kMultiHeadAttention;
      for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
               {"self.W_q", "self.q_proj"}, {"self.W_k", "self.k_proj"}, {"self.W_v", "self.v_proj"},
               {"self.W_o", "self.o_proj"}})
        for (size_t at = src.find(from); at != std::string::npos; at = src.find(from, at + to.size()))
          src.replace(at, from.size(), to);
      return src;
    }();
    return build(g ? "GroupedQueryAttention" : "MultiHeadAttention",
                 {{g ? "q_proj" : "W_q", linear(a->W_q)},
                  {g ? "k_proj" : "W_k", linear(a->W_k)},
                  {g ? "v_proj" : "W_v", linear(a->W_v)},
                  {g ? "o_proj" : "W_o", linear(a->W_o)}},
                 {},
                 {{"num_heads", int_type, a->options.num_heads()},
                  {"head_dim", int_type, a->head_dim},
                  {"embed_dim", int_type, a->options.embed_dim()},
                  {"scale", c10::FloatType::get(), std::sqrt(static_cast<double>(a->head_dim))}},
                 g ? grouped_source : std::string(ts_source::kMultiHeadAttention));
  }

  Module feed_forward(FeedForward& f) {
    return build("FeedForward", {{"linear1", linear(f->linear1)}, {"linear2", linear(f->linear2)}}, {},
                 {{"activation", c10::IntType::get(), static_cast<int64_t>(f->options.activation())}},
                 ts_source::kFeedForward);
  }

  // A mixture of experts: children experts ("0".."E-1", a container whose dispatch() is
  // unrolled per expert count, as the layer lists) and gate; attribute top_k.
  Module mixture_of_experts(MoELayer& moe) {
    Module experts = make("MoEExperts");
    std::string src =
        "def dispatch(self, flat: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:\n"
        "    out = torch.zeros_like(flat)\n";
    for (size_t e = 0; e < moe->experts->size(); ++e) {
      FeedForward expert(moe->experts->ptr<FeedForwardImpl>(e));
      const std::string n = std::to_string(e);
      experts.register_module(n, feed_forward(expert));
      // The (token, slot) pairs routed to expert n; its output weighted and added to its rows.
      src += "    hit = torch.nonzero(chosen == " + n + ")\n"
             "    if hit.size(0) > 0:\n"
             "        tokens = hit.select(1, 0)\n"
             "        w = weights.reshape([-1]).index_select(0, tokens * weights.size(1) + hit.select(1, 1))\n"
             "        y = getattr(self, \"" + n + "\").forward(flat.index_select(0, tokens))\n"
             "        out.index_add_(0, tokens, (y * w.unsqueeze(1)).to(out.dtype))\n";
    }
    src += "    return out\n";
    define(experts, "MoEExperts", src);
    return build("MoELayer", {{"experts", experts}, {"gate", linear(moe->gate)}}, {},
                 {{"top_k", c10::IntType::get(), moe->top_k}}, ts_source::kMoELayer);
  }

  Module feed_forward(FeedForwardSlot& slot) {
    return slot.moe ? mixture_of_experts(slot.moe) : feed_forward(slot.dense);
  }

  Module encoder_layer(TransformerEncoderLayer& l) {
    return build("TransformerEncoderLayer",
                 {{"self_attn", attention(l->self_attn)}, {"ffn", feed_forward(l->ffn)},
                  {"norm1", layer_norm(l->norm1)}, {"norm2", layer_norm(l->norm2)}},
                 {}, {{"pre_norm", c10::BoolType::get(), l->options.norm() == Norm::kPre}}, ts_source::kEncoderLayer);
  }

  Module decoder_layer(TransformerDecoderLayer& l) {
    return build("TransformerDecoderLayer",
                 {{"self_attn", attention(l->self_attn)}, {"cross_attn", attention(l->cross_attn)},
                  {"ffn", feed_forward(l->ffn)}, {"norm1", layer_norm(l->norm1)}, {"norm2", layer_norm(l->norm2)},
                  {"norm3", layer_norm(l->norm3)}},
                 {}, {{"pre_norm", c10::BoolType::get(), l->options.norm() == Norm::kPre}}, ts_source::kDecoderLayer);
  }

  // Layer lists: children "0".."N-1" (the native state-dict names); TorchScript cannot
  // iterate a C++-built module, so the methods are unrolled for the layer count.
  Module encoder_layers(torch::nn::ModuleList& layers) {
    Module m = make("EncoderLayers");
    std::string src =
        "def forward(self, x: Tensor, mask: Optional[Tensor], cos: Optional[Tensor], sin: Optional[Tensor]) -> "
        "Tensor:\n";
    for (size_t i = 0; i < layers->size(); ++i) {
      TransformerEncoderLayer layer(layers->ptr<TransformerEncoderLayerImpl>(i));
      m.register_module(std::to_string(i), encoder_layer(layer));
      src += "    x = getattr(self, \"" + std::to_string(i) + "\").forward(x, mask, cos, sin)\n";
    }
    src += "    return x\n";
    define(m, "EncoderLayers", src);
    return m;
  }

  Module decoder_layers(torch::nn::ModuleList& layers) {
    Module m = make("DecoderLayers");
    std::string fwd =
        "def forward(self, x: Tensor, memory: Tensor, src_mask: Optional[Tensor], tgt_mask: Optional[Tensor], "
        "cos: Optional[Tensor], sin: Optional[Tensor]) -> Tensor:\n";
    std::string start =
        "def start(self, memory: Tensor) -> Tuple[List[Tensor], List[Tensor]]:\n"
        "    ks: List[Tensor] = []\n"
        "    vs: List[Tensor] = []\n";
    // state = [src_mask, self_k[0..L), self_v[0..L), cross_k[0..L), cross_v[0..L)]
    const size_t n_layers = layers->size();
    std::string step =
        "def step(self, x: Tensor, state: List[Tensor], cos: Optional[Tensor], sin: Optional[Tensor]) -> Tensor:\n";
    for (size_t i = 0; i < n_layers; ++i) {
      const std::string n = std::to_string(i);
      const std::string layer = "getattr(self, \"" + n + "\")";
      TransformerDecoderLayer native(layers->ptr<TransformerDecoderLayerImpl>(i));
      m.register_module(n, decoder_layer(native));
      fwd += "    x = " + layer + ".forward(x, memory, src_mask, tgt_mask, cos, sin)\n";
      start += "    kv" + n + " = " + layer + ".cross_kv(memory)\n    ks.append(kv" + n + "[0])\n    vs.append(kv" + n +
               "[1])\n";
      const std::string sk = std::to_string(1 + i), sv = std::to_string(1 + n_layers + i),
                        ck = std::to_string(1 + 2 * n_layers + i), cv = std::to_string(1 + 3 * n_layers + i);
      step += "    out" + n + " = " + layer + ".step(x, state[" + sk + "], state[" + sv + "], state[" + ck +
              "], state[" + cv + "], state[0], cos, sin)\n    x = out" + n + "[0]\n    state[" + sk + "] = out" + n +
              "[1]\n    state[" + sv + "] = out" + n + "[2]\n";
    }
    fwd += "    return x\n";
    start += "    return (ks, vs)\n";
    step += "    return x\n";
    define(m, "DecoderLayers", fwd + "\n" + start + "\n" + step);
    return m;
  }

  Module transformer(Transformer& model) {
    const ModelConfig& c = model->config();
    const auto int_type = c10::IntType::get();
    std::vector<std::pair<std::string, Module>> children{
        {"src_embedding", embedding(model->src_embedding)},
        {"tgt_embedding", embedding(model->tgt_embedding)},
        {"pos_encoding", positional_encoding(model->pos_encoding)},
        {"encoder_layers", encoder_layers(model->encoder_layers)},
        {"decoder_layers", decoder_layers(model->decoder_layers)},
        {"fc_out", linear(model->fc_out)}};
    // The stacks' final LayerNorm (Pre-LN) or nothing, as methods the source calls.
    const bool pre = c.norm == Norm::kPre;
    if (pre) {
      children.emplace_back("encoder_norm", layer_norm(model->encoder_norm));
      children.emplace_back("decoder_norm", layer_norm(model->decoder_norm));
    }
    const std::string stack_ends =
        pre ? "\ndef encoder_out(self, x: Tensor) -> Tensor:\n    return self.encoder_norm.forward(x)\n"
              "\ndef decoder_out(self, x: Tensor) -> Tensor:\n    return self.decoder_norm.forward(x)\n"
            : "\ndef encoder_out(self, x: Tensor) -> Tensor:\n    return x\n"
              "\ndef decoder_out(self, x: Tensor) -> Tensor:\n    return x\n";
    Module m = build("Transformer", children,
                     {},
                     {{"embed_scale", c10::FloatType::get(), c.scale_embeddings ? std::sqrt(static_cast<double>(c.d_model)) : 1.0},
                      {"pad_id", int_type, c.pad_id},
                      {"bos_id", int_type, c.bos_id},
                      {"eos_id", int_type, c.eos_id},
                      {"max_positions", int_type, c.max_positions}},
                     std::string(ts_source::kTransformer) + stack_ends);
    define_archive_search(m);
    return m;
  }

 private:
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  c10::ScalarType dtype_;
  bool int8_;
  std::map<std::string, c10::ClassTypePtr> types_;
  std::set<std::string> defined_;
  std::unordered_map<const void*, at::Tensor> converted_;
  std::unordered_map<const void*, std::pair<at::Tensor, at::Tensor>> quantized_;
};

// What users and ScriptedDecoder call; freezing drops every other method.
const std::vector<std::string> kPreservedMethods = {"encode", "translate", "translate_with_scores", "start", "step",
                                                   "select", "reorder"};

}  // namespace

void define_archive_search(torch::jit::Module& module) { module.define(ts_source::kSearch); }

void TorchScriptExporter::write(const LoadedCheckpoint& checkpoint, const ExportOptions& options,
                                const std::string& path) {
  if (!checkpoint.model) throw std::runtime_error("nothing to export: the checkpoint holds no model");
  if (options.dtype != c10::ScalarType::Float && options.dtype != c10::ScalarType::BFloat16 &&
      options.dtype != c10::ScalarType::Half)
    throw std::invalid_argument("export dtype must be fp32, bf16 or fp16");
  if (checkpoint.meta.src_spm_model.empty())
    throw std::runtime_error("the checkpoint carries no SentencePiece model; an export must embed one");

  if (options.quantize_int8 && options.dtype != c10::ScalarType::Float)
    throw std::invalid_argument("--dtype int8 keeps the other weights (biases, LayerNorm) in fp32");
  if (options.quantize_int8 && options.freeze)
    throw std::invalid_argument("--freeze would fold the int8 weights back into float constants; export int8 without it");

  torch::NoGradGuard no_grad;
  Transformer model = checkpoint.model;
  ScriptBuilder builder(options.dtype, options.quantize_int8);
  Module module = builder.transformer(model);
  module.eval();
  if (options.freeze) {
    try {
      module = torch::jit::freeze(module, kPreservedMethods, /*optimize_numerics=*/true);
      module = torch::jit::optimize_for_inference(module, kPreservedMethods);
    } catch (const std::exception& e) {
      throw std::runtime_error("freezing the TorchScript module failed: " + first_line(e.what()));
    }
  }

  FlatConfig marker;
  marker.set("format", kTorchScriptFormat);
  marker.set("format_version", std::to_string(kTorchScriptFormatVersion));
  marker.set("dtype", options.quantize_int8 ? "int8" : dtype_name(options.dtype));
  marker.set("frozen", options.freeze ? "true" : "false");
  marker.set("torchmt_version", TORCHMT_VERSION);
  marker.set("torch_version", std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                                  std::to_string(TORCH_VERSION_PATCH));
  marker.set("step", std::to_string(checkpoint.meta.position.step));
  marker.set("spm_checksum", "fnv1a:" + fnv1a_hex(checkpoint.meta.src_spm_model));
  marker.set("pad_id", std::to_string(checkpoint.meta.model.pad_id));
  marker.set("bos_id", std::to_string(checkpoint.meta.model.bos_id));
  marker.set("eos_id", std::to_string(checkpoint.meta.model.eos_id));
  for (const auto& [key, value] : language_fields(checkpoint.meta)) marker.set(key, value);

  torch::jit::ExtraFilesMap extra;
  extra["torchmt.json"] = marker.to_json();
  extra["config.json"] = checkpoint.meta.model.to_json();
  extra["spm.model"] = checkpoint.meta.src_spm_model;
  if (!checkpoint.meta.tgt_spm_model.empty() && checkpoint.meta.tgt_spm_model != checkpoint.meta.src_spm_model)
    extra["tgt_spm.model"] = checkpoint.meta.tgt_spm_model;
  if (!checkpoint.meta.vocabulary.empty()) extra["vocabulary.json"] = checkpoint.meta.vocabulary;
  if (!checkpoint.meta.language_identifier.empty()) extra["language_identifier.bin"] = checkpoint.meta.language_identifier;
  if (!options.activation_ranges.empty()) {  // static int8 (export --calibrate): read by ExportedModel
    nlohmann::json ranges = nlohmann::json::object();
    for (const auto& [name, range] : options.activation_ranges) ranges[name] = {range.amax, range.has_negative};
    extra["activation_ranges.json"] = ranges.dump();
  }

  std::ostringstream bytes;
  try {
    module.save(bytes, extra);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write export " + path + ": " + first_line(e.what()));
  }
  atomic_write(path, seal_zip(bytes.str()));
}

}  // namespace torchmt
