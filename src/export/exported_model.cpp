#include "torchmt/export/exported_model.h"

#include "torchmt/data/shortlist.h"
#include "torchmt/decoding/translation_dtype.h"
#include "torchmt/io/checkpoint.h"

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include "torchmt/export/script_call.h"
#include "torchmt/model/linear.h"
#include "torchmt/export/torchscript_exporter.h"
#include "torchmt/util/atomic_file.h"
#include "torchmt/util/device.h"
#include "torchmt/util/integrity.h"
#include "torchmt/util/flat_config.h"
#include "torchmt/util/strings.h"

namespace torchmt {

bool is_torchscript_export(const std::string& path) {
  try {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    caffe2::serialize::PyTorchStreamReader reader(path);
    return reader.hasRecord("extra/torchmt.json");
  } catch (...) {
    return false;
  }
}

struct ExportedModel::Impl {
  torch::jit::Module module;
  ModelConfig config;
  Tokenizer src_tok;
  Tokenizer tgt_tok;
  c10::Device device;
  std::string dtype;
  bool frozen = false;
  std::map<std::string, ActivationRange> activation_ranges;  // static int8 (export --calibrate)
};

ExportedModel::ExportedModel(const std::string& path, const c10::Device& device) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("model not found: " + path);
  std::istringstream archive;
  {
    std::string content = read_file(path);
    check_zip_seal(content, "export", path);  // before anything reads the archive
    archive.str(std::move(content));
  }
  if (!is_torchscript_export(path))
    throw std::runtime_error(path + " is not a torchmt export (no torchmt.json in a TorchScript archive; " +
                             "write one with `torchmt export`)");
  torch::jit::ExtraFilesMap extra{{"torchmt.json", ""},  {"config.json", ""},      {"spm.model", ""},
                                  {"tgt_spm.model", ""}, {"vocabulary.json", ""}, {"activation_ranges.json", ""}};
  torch::jit::Module module;
  try {
    module = torch::jit::load(archive, device, extra);
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
  module.eval();
  impl_ = std::make_shared<const Impl>(Impl{std::move(module), config, src, tgt, device,
                                            marker.get_or("dtype", "fp32"), marker.get_or("frozen", "false") == "true",
                                            std::move(ranges)});
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

Translator make_translator(const ExportedModel& model, c10::ScalarType dtype) {
  DecoderFactory factory = [model](bool use_cache) {
    if (!use_cache) throw std::invalid_argument("--no-cache is not available for TorchScript exports");
    return model.decoder();
  };
  return Translator(std::move(factory), model.config(), model.tokenizer(), model.target_tokenizer(), model.device(),
                    dtype);
}

Translator load_translator(const std::string& path, const c10::Device& device, c10::ScalarType dtype) {
  if (is_torchscript_export(path)) return make_translator(ExportedModel(path, device), dtype);
  return Translator::from_checkpoint(path, device, dtype);
}

SealOutcome seal_model_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("model not found: " + path);
  const std::string content = read_file(path);
  if (verify_zip_seal(content, "model file", path) == Seal::kVerified) return SealOutcome::kAlreadySealed;
  // The sealed bytes go through the ordinary loader from a file beside the original; only when
  // that loads does the original become them.
  const std::string sealed = seal_zip(content), trial = path + ".seal-check";
  atomic_write(trial, sealed);
  try {
    load_translator(trial, c10::Device(c10::kCPU), c10::kFloat);
  } catch (const std::exception& e) {
    remove_tree(trial);
    std::string message = first_line(e.what());
    for (size_t at = message.find(trial); at != std::string::npos; at = message.find(trial, at + path.size()))
      message.replace(at, trial.size(), path);
    throw std::runtime_error("not sealed: " + message);
  }
  remove_tree(trial);
  atomic_write(path, sealed);
  return SealOutcome::kSealed;
}

namespace {
// Packed, quantized and screened once at load (the kernels' preparation), on the CPU.
void prepare_for_cpu_inference(Translator& translator, InferencePrecision precision) {
  if (translator.model() && translator.device().is_cpu())
    prepare_linears_for_inference(*translator.model(), precision, &translator.model()->fc_out);
}
}  // namespace

Translator load_translator(const TranslatorConfig& config) {
  config.validate();
  if (!config.translation.use_cache && is_torchscript_export(config.model))
    throw std::invalid_argument("--no-cache is not available for TorchScript exports");
  // int8: the model's Linear weights quantized per row at load, activations per row at run
  // time (src/kernels/primitives.h); everything else runs in fp32. An int8 export runs so
  // by default on the CPU; elsewhere, or at another --dtype, through its own TorchScript. The
  // int8 kernels are CPU kernels: --device auto means the CPU for them, even beside a GPU.
  const c10::Device device = config.dtype == "int8" && config.device == "auto" ? c10::Device(c10::kCPU)
                                                                               : resolve_device(config.device);
  if (config.dtype == "int8" && !device.is_cpu())
    throw std::invalid_argument("--dtype int8 runs on the CPU (use fp32 or bf16 on " + device.str() + ")");
  // Prepared (and shortlisted) before `auto` measures fp32 against bf16: it measures what will run.
  auto prepare = [&](Translator& translator, InferencePrecision precision) {
    // The translator's threads, not the process's: the program around the library owns those.
    if (config.threads > 0) translator.set_cpu_threads(config.threads);
    prepare_for_cpu_inference(translator, precision);
    if (!config.shortlist.empty())
      translator.set_shortlist(std::make_shared<const Shortlist>(
          Shortlist::load(config.shortlist, translator.src_tokenizer(), translator.tgt_tokenizer())));
  };
  if (is_torchscript_export(config.model)) {
    ExportedModel exported(config.model, device);
    if (config.dtype == "int8" || (config.dtype == "auto" && exported.dtype() == "int8" && device.is_cpu())) {
      Translator translator(exported.native_model(), exported.tokenizer(), exported.target_tokenizer(), device,
                            c10::ScalarType::Float);
      prepare(translator, InferencePrecision::kInt8);
      return translator;
    }
    Translator translator = make_translator(exported, resolve_dtype(config.dtype, device));
    prepare(translator, InferencePrecision::kFloat);
    if (config.dtype == "auto") choose_translation_dtype(translator, config.translation);
    return translator;
  }
  if (config.dtype != "int8") {
    Translator translator = Translator::from_checkpoint(config.model, device, resolve_dtype(config.dtype, device));
    prepare(translator, InferencePrecision::kFloat);
    // "auto": measured (translation_dtype.h), not taken from the CPU's flags or the device kind.
    if (config.dtype == "auto") choose_translation_dtype(translator, config.translation);
    return translator;
  }
  auto translator = Translator::from_checkpoint(config.model, device, c10::ScalarType::Float);
  prepare(translator, InferencePrecision::kInt8);
  return translator;
}

}  // namespace torchmt
