#include "torchmt/loading/exported_model.h"

#include "io/checkpoint.h"

#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include "loading/script_call.h"
#include "model/linear.h"
#include "torchmt/util/flat_config.h"
#include "torchmt/util/strings.h"

namespace torchmt {

struct ExportedModel::Impl {
  torch::jit::Module module;
  ModelConfig config;
  Tokenizer src_tok;
  Tokenizer tgt_tok;
  c10::Device device;
  std::string dtype;
  bool frozen = false;
  std::map<std::string, ActivationRange> activation_ranges;  // static int8 (export --calibrate)
  ModelLanguages languages;
};

ExportedModel::ExportedModel(const std::string& path, const c10::Device& device)
    : ExportedModel(ModelFile::read(path, "export"), device) {}

ExportedModel::ExportedModel(const ModelFile& file, const c10::Device& device) {
  const std::string& path = file.path();
  if (file.format() != ModelFormat::kTorchScriptExport)
    throw std::runtime_error(path + " is not a torchmt export (no torchmt.json in a TorchScript archive; " +
                             "write one with `torchmt export`)");
  torch::jit::ExtraFilesMap extra{{"torchmt.json", ""},  {"config.json", ""},      {"spm.model", ""},
                                  {"tgt_spm.model", ""}, {"vocabulary.json", ""}, {"activation_ranges.json", ""},
                                  {"language_identifier.bin", ""}};
  torch::jit::Module module;
  try {
    module = torch::jit::load(file.reader(), device, extra);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot load TorchScript export " + path + ": " + first_line(e.what()));
  }
  FlatConfig marker;
  try {
    marker = FlatConfig::parse(extra["torchmt.json"]);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + " has a malformed torchmt.json: " + e.what());
  }
  if (marker.get_or("format", "") != kTorchScriptFormat)
    throw std::runtime_error(path + " is not a torchmt TorchScript export (format '" + marker.get_or("format", "") +
                             "')");
  if (marker.get_int("format_version") > kTorchScriptFormatVersion)
    throw std::runtime_error(path + " was written by a newer torchmt (export format version " +
                             marker.get("format_version") + ")");
  if (marker.get_int("format_version") < kTorchScriptFormatVersion || !module.find_method("step"))
    throw std::runtime_error(path + " was written by an older torchmt (export format version " +
                             marker.get("format_version") + "): export it again with `torchmt export`");
  ModelConfig config;
  try {
    config = ModelConfig::from_json(extra["config.json"]);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + " has an invalid config.json: " + e.what());
  }
  if (extra["spm.model"].empty()) throw std::runtime_error(path + " carries no SentencePiece model (spm.model)");
  const auto tokenizers = [&] {
    try {
      return make_tokenizers(extra["spm.model"], extra["tgt_spm.model"], extra["vocabulary.json"], config);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(path + " " + e.what());
    }
  }();
  Tokenizer src = tokenizers.first, tgt = tokenizers.second;
  std::map<std::string, ActivationRange> ranges;
  if (!extra["activation_ranges.json"].empty()) {
    try {
      const auto json = nlohmann::json::parse(extra["activation_ranges.json"]);
      for (auto it = json.begin(); it != json.end(); ++it)
        ranges[it.key()] = ActivationRange{it.value().at(0).get<float>(), it.value().at(1).get<bool>()};
    } catch (const std::exception& e) {
      throw std::runtime_error(path + " has a malformed activation_ranges.json: " + first_line(e.what()));
    }
  }
  ModelLanguages languages{marker.get_or("source_language", ""), marker.get_or("target_language", ""), {},
                           marker.get_or("both_directions", "") == "true", {}, {}};
  if (!extra["language_identifier.bin"].empty()) {
    try {
      languages.identifier = LanguageIdentifier::deserialize(extra["language_identifier.bin"]);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(path + " has " + e.what());
    }
  }
  module.eval();
  impl_ = std::make_shared<const Impl>(Impl{std::move(module), config, src, tgt, device,
                                            marker.get_or("dtype", "fp32"), marker.get_or("frozen", "false") == "true",
                                            std::move(ranges), std::move(languages)});
}

std::unique_ptr<IncrementalDecoder> ExportedModel::decoder() const {
  return make_script_decoder(impl_->module, impl_->device, impl_->config.tgt_vocab_size);
}

SearchResult ExportedModel::translate_in_archive(const at::Tensor& src, const SearchOptions& options) const {
  return run_archive_search(impl_->module, src.to(impl_->device), options);
}

const Tokenizer& ExportedModel::tokenizer() const { return impl_->src_tok; }
const Tokenizer& ExportedModel::target_tokenizer() const { return impl_->tgt_tok; }
const ModelConfig& ExportedModel::config() const { return impl_->config; }
const ModelLanguages& ExportedModel::languages() const { return impl_->languages; }
c10::Device ExportedModel::device() const { return impl_->device; }
std::string ExportedModel::dtype() const { return impl_->dtype; }
bool ExportedModel::frozen() const { return impl_->frozen; }

Transformer ExportedModel::native_model() const {
  if (impl_->frozen)
    throw std::invalid_argument("a frozen export keeps no weights to rebuild the model from; export it without --freeze");
  std::unordered_map<std::string, at::Tensor> tensors;
  for (const auto& p : impl_->module.named_parameters(/*recurse=*/true)) tensors.emplace(p.name, p.value);
  for (const auto& b : impl_->module.named_buffers(/*recurse=*/true)) tensors.emplace(b.name, b.value);
  Transformer model(nullptr);
  {
    SkipParameterInit no_random_draws;  // every parameter is set below
    model = Transformer(impl_->config);
  }
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    auto it = tensors.find(p.key());
    if (it == tensors.end()) throw std::runtime_error("the export lacks the weight " + p.key());
    at::Tensor value = it->second.to(torch::kCPU);
    if (value.scalar_type() == torch::kChar) {  // int8: q / inverse scale per row (kInt8Linear)
      const std::string scope = p.key().substr(0, p.key().rfind('.'));
      auto scale = tensors.find(scope + ".weight_scale");
      if (scale == tensors.end()) throw std::runtime_error("the export lacks " + scope + ".weight_scale");
      value = value.to(torch::kFloat) / scale->second.to(torch::kCPU, torch::kFloat).unsqueeze(1);
    }
    if (value.sizes() != p.value().sizes())
      throw std::runtime_error("the export's " + p.key() + " has shape " + c10::str(value.sizes()) +
                               ", the model " + c10::str(p.value().sizes()));
    p.value().copy_(value);
  }
  for (const auto& item : model->named_modules())  // static int8: each layer's calibrated input range
    if (auto* linear = dynamic_cast<QuantizableLinearImpl*>(item.value().get()))
      if (auto it = impl_->activation_ranges.find(item.key() + ".weight"); it != impl_->activation_ranges.end())
        linear->input_range = it->second;
  model->eval();
  return model;
}

}  // namespace torchmt
