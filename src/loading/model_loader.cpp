#include "torchmt/loading/model_loader.h"

#include <filesystem>
#include <optional>
#include <stdexcept>

#include "torchmt/data/shortlist.h"
#include "torchmt/decoding/ensemble_decoder.h"
#include "torchmt/decoding/translation_dtype.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/io/model_file.h"
#include "torchmt/model/linear.h"
#include "torchmt/util/atomic_file.h"
#include "torchmt/util/device.h"
#include "torchmt/util/integrity.h"
#include "torchmt/util/strings.h"

namespace torchmt {

namespace {

Translator checkpoint_translator(const ModelFile& file, const c10::Device& device, c10::ScalarType dtype) {
  auto loaded = load_checkpoint(file, device);
  const auto tokenizers = [&] {
    try {
      return checkpoint_tokenizers(loaded.meta);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("checkpoint " + file.path() + " " + e.what());
    }
  }();
  return Translator(loaded.model, tokenizers.first, tokenizers.second, device, dtype);
}

// Packed, quantized and screened once at load (the kernels' preparation), on the CPU. The
// translator only translates: its int8 layers keep no fp32 copy beside the int8 one (a base-size
// model: 158 MB), but the output projection (shortlists slice it; embeddings may share it).
void prepare_for_cpu_inference(Translator& translator, InferencePrecision precision) {
  if (translator.model() && translator.device().is_cpu()) {
    const torch::nn::Linear& fc_out = translator.model()->fc_out;
    prepare_linears_for_inference(*translator.model(), precision, &fc_out,
                                  precision == InferencePrecision::kInt8 ? &fc_out : nullptr);
  }
}

}  // namespace

Translator make_translator(const ExportedModel& model, c10::ScalarType dtype) {
  DecoderFactory factory = [model](bool use_cache) {
    if (!use_cache) throw std::invalid_argument("--no-cache is not available for TorchScript exports");
    return model.decoder();
  };
  return Translator(std::move(factory), model.config(), model.tokenizer(), model.target_tokenizer(), model.device(),
                    dtype);
}

Translator load_translator(const std::string& path, const c10::Device& device, c10::ScalarType dtype) {
  const ModelFile file = ModelFile::read(path);
  if (file.format() == ModelFormat::kTorchScriptExport) return make_translator(ExportedModel(file, device), dtype);
  return checkpoint_translator(file, device, dtype);
}

namespace {

// One model of config.models (`path`), as load_translator(config) describes.
Translator load_one(const TranslatorConfig& config, const std::string& path) {
  // int8: the model's Linear weights quantized per row at load, activations per row at run
  // time (src/kernels/primitives.h); everything else runs in fp32. An int8 export runs so
  // by default on the CPU; elsewhere, or at another --dtype, through its own TorchScript. The
  // int8 kernels are CPU kernels: --device auto means the CPU for them, even beside a GPU.
  const c10::Device device = config.dtype == "int8" && config.device == "auto" ? c10::Device(c10::kCPU)
                                                                               : resolve_device(config.device);
  if (config.dtype == "int8" && !device.is_cpu())
    throw std::invalid_argument("--dtype int8 runs on the CPU (use fp32 or bf16 on " + device.str() + ")");
  std::optional<ModelFile> file = ModelFile::read(path);
  const bool exported = file->format() == ModelFormat::kTorchScriptExport;
  if (!config.translation.use_cache && exported)
    throw std::invalid_argument("--no-cache is not available for TorchScript exports");
  // Prepared (and shortlisted) before `auto` measures fp32 against bf16: it measures what will run.
  auto prepare = [&](Translator& translator, InferencePrecision precision) {
    // The translator's threads, not the process's: the program around the library owns those.
    if (config.threads > 0) translator.set_cpu_threads(config.threads);
    // Packed for the kernels this translator will run (its instruction set and GEMM).
    std::optional<RuntimeScope> kernels;
    if (config.runtime) {
      translator.set_runtime(*config.runtime);
      kernels.emplace(*config.runtime);
    }
    prepare_for_cpu_inference(translator, precision);
    if (!config.shortlist.empty())
      translator.set_shortlist(std::make_shared<const Shortlist>(
          Shortlist::load(config.shortlist, translator.src_tokenizer(), translator.tgt_tokenizer())));
  };
  std::optional<Translator> translator;
  InferencePrecision precision = InferencePrecision::kFloat;
  if (exported) {
    ExportedModel model(*file, device);
    if (config.dtype == "int8" || (config.dtype == "auto" && model.dtype() == "int8" && device.is_cpu())) {
      translator.emplace(model.native_model(), model.tokenizer(), model.target_tokenizer(), device,
                         c10::ScalarType::Float);
      precision = InferencePrecision::kInt8;
    } else {
      translator.emplace(make_translator(model, resolve_dtype(config.dtype, device)));
    }
  } else if (config.dtype == "int8") {
    translator.emplace(checkpoint_translator(*file, device, c10::ScalarType::Float));
    precision = InferencePrecision::kInt8;
  } else {
    translator.emplace(checkpoint_translator(*file, device, resolve_dtype(config.dtype, device)));
  }
  file.reset();  // the file's bytes are not needed beside the packed weights
  prepare(*translator, precision);
  // "auto": measured (translation_dtype.h), not taken from the CPU's flags or the device kind.
  if (precision == InferencePrecision::kFloat && config.dtype == "auto")
    choose_translation_dtype(*translator, config.translation);
  return std::move(*translator);
}

}  // namespace

Translator load_translator(const TranslatorConfig& config) {
  config.validate();
  if (config.models.size() == 1) return load_one(config, config.models.front());
  // An ensemble: each model loaded and prepared as a single one (its own precision measured for
  // `auto`), the shortlist applied once, to the ensemble.
  TranslatorConfig member = config;
  member.shortlist.clear();
  std::vector<Translator> members;
  for (const auto& path : config.models) members.push_back(load_one(member, path));
  Translator ensemble = make_ensemble_translator(
      std::move(members), parse_ensemble_weights(config.ensemble_weights, config.models.size()), config.models);
  if (config.threads > 0) ensemble.set_cpu_threads(config.threads);
  if (!config.shortlist.empty())
    ensemble.set_shortlist(std::make_shared<const Shortlist>(
        Shortlist::load(config.shortlist, ensemble.src_tokenizer(), ensemble.tgt_tokenizer())));
  return ensemble;
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

}  // namespace torchmt
