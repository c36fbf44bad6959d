#include "torchmt/loading/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "data/shortlist.h"
#include "decoding/ensemble_decoder.h"
#include "decoding/translation_dtype.h"
#include "io/checkpoint.h"
#include "torchmt/io/model_file.h"
#include "model/linear.h"
#include "util/atomic_file.h"
#include "torchmt/util/device.h"
#include "util/integrity.h"
#include "torchmt/util/strings.h"

namespace torchmt {

namespace {

Translator checkpoint_translator(const ModelFile& file, const c10::Device& device, c10::ScalarType dtype,
                                WeightMemory memory = WeightMemory::kOwn) {
  auto loaded = load_checkpoint(file, device, memory);
  const auto tokenizers = [&] {
    try {
      return checkpoint_tokenizers(loaded.meta);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("checkpoint " + file.path() + " " + e.what());
    }
  }();
  Translator translator(loaded.model, tokenizers.first, tokenizers.second, device, dtype);
  try {
    translator.set_languages(checkpoint_languages(loaded.meta));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("checkpoint " + file.path() + " has " + e.what());
  }
  return translator;
}

// Packed, quantized and screened once at load (the kernels' preparation), on the CPU. The
// translator only translates: its int8 layers keep no fp32 copy beside the int8 one (a base-size
// model: 158 MB), and in fp32 its feed-forward outputs keep one layout of their weight (48 MB),
// but the output projection keeps its own (shortlists slice it; embeddings may share it).
void prepare_for_cpu_inference(Translator& translator, InferencePrecision precision) {
  if (translator.model() && translator.device().is_cpu()) {
    const torch::nn::Linear& fc_out = translator.model()->fc_out;
    const bool one_copy = precision == InferencePrecision::kInt8 || translator.dtype() == c10::ScalarType::Float;
    prepare_linears_for_inference(*translator.model(), precision, &fc_out, one_copy ? &fc_out : nullptr);
  }
}

// Every parameter of `model` in memory of its own but the weights int8 preparation replaces
// (all Linear weights but the output projection's), which are read from the file's pages once,
// as each layer is quantized: an int8 load never holds the whole fp32 model.
void own_all_but_int8_weights(Transformer& model) {
  std::unordered_set<const c10::TensorImpl*> quantized;
  for (const auto& m : model->modules(/*include_self=*/false)) {
    const auto* linear = dynamic_cast<const QuantizableLinearImpl*>(m.get());
    if (linear && linear != model->fc_out.get()) quantized.insert(linear->weight.unsafeGetTensorImpl());
  }
  for (auto& p : model->parameters())
    if (!quantized.count(p.unsafeGetTensorImpl())) own_file_pages(p);
}

}  // namespace

Translator make_translator(const ExportedModel& model, c10::ScalarType dtype) {
  DecoderFactory factory = [model](bool use_cache) {
    if (!use_cache) throw std::invalid_argument("--no-cache is not available for TorchScript exports");
    return model.decoder();
  };
  Translator translator(std::move(factory), model.config(), model.tokenizer(), model.target_tokenizer(), model.device(),
                        dtype);
  translator.set_languages(model.languages());
  return translator;
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
      translator->set_languages(model.languages());
      precision = InferencePrecision::kInt8;
    } else {
      translator.emplace(make_translator(model, resolve_dtype(config.dtype, device)));
    }
  } else if (config.dtype == "int8") {
    translator.emplace(checkpoint_translator(*file, device, c10::ScalarType::Float, WeightMemory::kFileMapped));
    own_all_but_int8_weights(translator->model());
    precision = InferencePrecision::kInt8;
  } else {
    translator.emplace(checkpoint_translator(*file, device, resolve_dtype(config.dtype, device)));
  }
  file.reset();  // the file's bytes are not needed beside the packed weights
  prepare(*translator, precision);
  if (translator->model()) {
    for (auto& p : translator->model()->parameters()) own_file_pages(p);  // what int8 left unquantized
  }
  // "auto": measured (translation_dtype.h), not taken from the CPU's flags or the device kind.
  if (precision == InferencePrecision::kFloat && config.dtype == "auto") {
    choose_translation_dtype(*translator, config.translation);
    if (translator->model() && translator->device().is_cpu() && translator->dtype() == c10::ScalarType::Float)
      release_float_weights(*translator->model(), &translator->model()->fc_out);
  }
  return std::move(*translator);
}

}  // namespace

namespace {

// An ensemble of models loaded and prepared as single ones (each its own precision measured for
// `auto`, without the shortlist), the shortlist applied once, to the ensemble.
Translator ensemble_of(std::vector<Translator> members, const TranslatorConfig& config,
                       const std::vector<std::string>& paths, const std::string& weights) {
  Translator ensemble =
      make_ensemble_translator(std::move(members), parse_ensemble_weights(weights, paths.size()), paths);
  if (config.threads > 0) ensemble.set_cpu_threads(config.threads);
  if (!config.shortlist.empty())
    ensemble.set_shortlist(std::make_shared<const Shortlist>(
        Shortlist::load(config.shortlist, ensemble.src_tokenizer(), ensemble.tgt_tokenizer())));
  return ensemble;
}

}  // namespace

Translator load_translator(const TranslatorConfig& config) {
  config.validate();
  if (config.models.size() == 1) return load_one(config, config.models.front());
  TranslatorConfig member = config;
  member.shortlist.clear();
  std::vector<Translator> members;
  for (const auto& path : config.models) members.push_back(load_one(member, path));
  return ensemble_of(std::move(members), config, config.models, config.ensemble_weights);
}

std::vector<DirectionModel> load_translators_by_direction(const TranslatorConfig& config) {
  config.validate();
  TranslatorConfig member = config;
  member.shortlist.clear();
  std::vector<std::pair<std::string, std::string>> directions;
  std::vector<std::vector<Translator>> members;
  std::vector<std::vector<std::string>> paths;
  for (const auto& path : config.models) {
    Translator t = load_one(config.models.size() == 1 ? config : member, path);
    const std::pair<std::string, std::string> direction{t.languages().source, t.languages().target};
    const auto it = std::find(directions.begin(), directions.end(), direction);
    const size_t group = static_cast<size_t>(it - directions.begin());
    if (it == directions.end()) {
      directions.push_back(direction);
      members.emplace_back();
      paths.emplace_back();
    }
    members[group].push_back(std::move(t));
    paths[group].push_back(path);
  }
  if (directions.size() > 1 && !config.shortlist.empty())
    throw std::invalid_argument("--shortlist: the models translate " + std::to_string(directions.size()) +
                                " directions (a shortlist is of one)");
  if (directions.size() > 1 && !config.ensemble_weights.empty())
    throw std::invalid_argument("--ensemble-weights: the models translate " + std::to_string(directions.size()) +
                                " directions (weights are for an ensemble of one direction)");
  std::vector<DirectionModel> out;
  for (size_t g = 0; g < directions.size(); ++g) {
    std::string name;
    for (const auto& p : paths[g]) name += (name.empty() ? "" : "+") + p;
    if (members[g].size() == 1) {
      out.push_back({std::move(members[g].front()), name});
    } else {
      out.push_back({ensemble_of(std::move(members[g]), config, paths[g], config.ensemble_weights), name});
    }
  }
  return out;
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
