#include "io/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <ATen/Context.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "torchmt/io/model_file.h"
#include "model/linear.h"
#include "util/atomic_file.h"
#include "util/integrity.h"
#include "torchmt/util/strings.h"


namespace torchmt {
namespace {

constexpr const char* kFormat = "torchmt-checkpoint";
constexpr int64_t kFormatVersion = 1;

using Dict = c10::impl::GenericDict;


Dict new_dict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

// torch::pickle_load's archive layout ("data.pkl" + "data/N") read through the bounded reader.
// kFileMapped: the tensors' data stays in the mapped file (ModelFile::map_record) where it is
// aligned, so that a record's pages are read only when its tensor is (an int8 load quantizes
// layer by layer and never holds the whole fp32 model). kOwn: read into memory before the model
// is built (copied later, the weights would land in the heap among the freed placeholders).
c10::IValue pickle_load_bounded(const ModelFile& file, WeightMemory memory) {
  caffe2::serialize::PyTorchStreamReader reader(file.reader());
  auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  const char* pickle_bytes = static_cast<const char*>(pickle.get());
  size_t pickle_read = 0;
  std::function<size_t(char*, size_t)> read = [&](char* buffer, size_t n) -> size_t {
    n = std::min(n, pickle_size - pickle_read);
    std::memcpy(buffer, pickle_bytes + pickle_read, n);
    pickle_read += n;
    return n;
  };
  std::function<at::DataPtr(const std::string&)> read_record = [&](const std::string& name) {
    const std::string record = "data/" + name;
    at::DataPtr mapped;
    if (memory == WeightMemory::kFileMapped) mapped = file.map_record(reader.getRecordOffset(record));
    return mapped ? std::move(mapped) : std::get<0>(reader.getRecord(record));
  };
  torch::jit::Unpickler unpickler(std::move(read), torch::jit::TypeResolver(), torch::jit::ObjLoader(),
                                  std::move(read_record), /*device=*/{});
  unpickler.set_version(reader.version());
  c10::IValue value = unpickler.parse_ivalue();
  file.check_mapped_storages(value);
  return value;
}

Dict read_checkpoint_dict(const ModelFile& file, WeightMemory memory = WeightMemory::kOwn) {
  const std::string& path = file.path();
  if (file.format() != ModelFormat::kCheckpoint)
    throw std::runtime_error(path + " is a " + model_format_name(file.format()) + ", not a torchmt checkpoint");
  c10::IValue value;
  try {
    value = pickle_load_bounded(file, memory);
  } catch (const std::exception& e) {
    throw DamagedFileError("checkpoint " + path + " is corrupt or truncated (" +
                             first_line(e.what()) + ")");
  }
  if (!value.isGenericDict()) throw std::runtime_error(path + " is not a torchmt checkpoint");
  Dict dict = value.toGenericDict();
  if (!dict.contains("format") || !dict.at("format").isString() || dict.at("format").toStringRef() != kFormat)
    throw std::runtime_error(path + " is not a torchmt checkpoint");
  if (dict.at("format_version").toInt() > kFormatVersion)
    throw std::runtime_error(path + " was written by a newer torchmt (format version " +
                             std::to_string(dict.at("format_version").toInt()) + ")");
  return dict;
}

std::string get_string(const Dict& d, const std::string& key) {
  return d.contains(key) ? d.at(key).toStringRef() : std::string();
}

// Binary blobs (SentencePiece protos) go in as uint8 tensors: a pickled str must be UTF-8
// for Python's torch.load to read the file.
at::Tensor bytes_to_tensor(const std::string& bytes) {
  auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return t;
}

std::string get_bytes(const Dict& d, const std::string& key) {
  if (!d.contains(key)) return std::string();
  if (d.at(key).isString()) return d.at(key).toStringRef();  // written by torchmt before 0.1.0 final
  auto t = d.at(key).toTensor().contiguous();
  return std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()), static_cast<size_t>(t.numel()));
}

// A set of output columns as a [vocab] mask of 0/1 bytes (ModelLanguages::target_columns).
std::string columns_to_mask(const std::vector<int64_t>& columns, int64_t vocab) {
  std::string mask(static_cast<size_t>(vocab), '\0');
  for (int64_t id : columns) mask.at(static_cast<size_t>(id)) = 1;
  return mask;
}

std::vector<int64_t> mask_to_columns(const std::string& mask, int64_t vocab, const std::string& key,
                                     const std::string& path) {
  std::vector<int64_t> columns;
  if (mask.empty()) return columns;
  if (static_cast<int64_t>(mask.size()) != vocab)
    throw std::runtime_error("checkpoint " + path + " has a corrupt " + key + ": " + std::to_string(mask.size()) +
                             " entries for a " + std::to_string(vocab) + "-piece output");
  for (size_t id = 0; id < mask.size(); ++id) {
    if (mask[id] != 0 && mask[id] != 1)
      throw std::runtime_error("checkpoint " + path + " has a corrupt " + key + ": entry " + std::to_string(id) +
                               " is neither 0 nor 1");
    if (mask[id] == 1) columns.push_back(static_cast<int64_t>(id));
  }
  return columns;
}

}  // namespace

std::pair<Tokenizer, Tokenizer> make_tokenizers(const std::string& src_spm_model, const std::string& tgt_spm_model,
                                                const std::string& vocabulary, const ModelConfig& config) {
  if (src_spm_model.empty()) throw std::runtime_error("carries no SentencePiece model");
  const bool joint = tgt_spm_model.empty() || tgt_spm_model == src_spm_model;
  if (vocabulary.empty()) {
    Tokenizer src = Tokenizer::from_serialized(src_spm_model);
    return {src, joint ? src : Tokenizer::from_serialized(tgt_spm_model)};
  }
  Vocabulary v{Vocabulary::pieces_from_json(vocabulary), config.special_ids()};
  if (static_cast<int64_t>(v.pieces.size()) != config.src_vocab_size ||
      static_cast<int64_t>(v.pieces.size()) != config.tgt_vocab_size)
    throw std::runtime_error("has a vocabulary of " + std::to_string(v.pieces.size()) +
                             " pieces for a model of " + std::to_string(config.src_vocab_size) + " / " +
                             std::to_string(config.tgt_vocab_size));
  Tokenizer src = Tokenizer::from_serialized(src_spm_model, v);
  return {src, joint ? src : Tokenizer::from_serialized(tgt_spm_model, v)};
}

std::pair<Tokenizer, Tokenizer> checkpoint_tokenizers(const CheckpointMeta& meta) {
  return make_tokenizers(meta.src_spm_model, meta.tgt_spm_model, meta.vocabulary, meta.model);
}

ModelLanguages checkpoint_languages(const CheckpointMeta& meta) {
  ModelLanguages languages{meta.source_language, meta.target_language, {}, meta.both_directions, meta.target_columns,
                           meta.source_columns};
  if (!meta.language_identifier.empty()) languages.identifier = LanguageIdentifier::deserialize(meta.language_identifier);
  return languages;
}

namespace {

CheckpointMeta read_meta(const Dict& dict, const std::string& path) {
  CheckpointMeta meta;
  try {
    meta.model = ModelConfig::from_json(get_string(dict, "model_config"));
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint " + path + " has an invalid model config: " + e.what());
  }
  meta.train_config = get_string(dict, "train_config");
  meta.src_spm_path = get_string(dict, "src_spm_path");
  meta.src_spm_checksum = get_string(dict, "src_spm_checksum");
  meta.src_spm_model = get_bytes(dict, "src_spm_model");
  meta.tgt_spm_path = get_string(dict, "tgt_spm_path");
  meta.tgt_spm_checksum = get_string(dict, "tgt_spm_checksum");
  meta.tgt_spm_model = get_bytes(dict, "tgt_spm_model");
  if (dict.contains("vocabulary")) meta.vocabulary = get_string(dict, "vocabulary");  // since 0.9
  meta.source_language = get_string(dict, "source_language");  // since 0.3
  meta.target_language = get_string(dict, "target_language");
  meta.language_identifier = get_bytes(dict, "language_identifier");
  meta.both_directions = dict.contains("both_directions") && dict.at("both_directions").toBool();  // absent: one direction
  const int64_t vocab = meta.model.tgt_vocab_size;
  meta.target_columns = mask_to_columns(get_bytes(dict, "target_columns"), vocab, "target_columns", path);
  meta.source_columns = mask_to_columns(get_bytes(dict, "source_columns"), vocab, "source_columns", path);
  auto pos = dict.at("position").toGenericDict();
  meta.position.step = pos.at("step").toInt();
  meta.position.epoch = pos.at("epoch").toInt();
  meta.position.batch_index = pos.at("batch_index").toInt();
  meta.position.best_bleu = pos.at("best_bleu").toDouble();
  meta.position.best_loss = pos.at("best_loss").toDouble();
  meta.position.train_seconds = pos.at("train_seconds").toDouble();
  return meta;
}

void load_weights(const Dict& dict, Transformer& model, const std::string& path) {
  auto weights = dict.at("model").toGenericDict();
  torch::NoGradGuard no_grad;
  // A loaded tensor that is alone in its storage becomes the parameter's data as it is (no
  // second copy of the weights to allocate and write: 30 MB for a `small` model); anything
  // else (another dtype, a view, a storage another parameter took) is copied.
  std::unordered_map<const void*, const void*> adopted;  // storage -> the parameter holding it
  for (auto& p : model->named_parameters()) {
    if (!weights.contains(p.key())) throw std::runtime_error("checkpoint " + path + " lacks parameter " + p.key());
    auto t = weights.at(p.key()).toTensor();
    if (t.sizes() != p.value().sizes()) {
      throw std::runtime_error("checkpoint " + path + ": parameter " + p.key() + " has shape " +
                               c10::str(t.sizes()) + " but the model expects " + c10::str(p.value().sizes()));
    }
    const void* storage = t.storage().unsafeGetStorageImpl();
    const void* parameter = p.value().unsafeGetTensorImpl();
    // (On the parameter's device only: set_data would move a GPU parameter to the CPU.)
    const bool whole = t.scalar_type() == p.value().scalar_type() && t.device() == p.value().device() &&
                       t.is_contiguous() && t.storage_offset() == 0 && t.storage().nbytes() == t.nbytes();
    auto [it, fresh] = adopted.emplace(storage, parameter);
    if (whole && (fresh || it->second == parameter)) {
      p.value().set_data(t);
    } else {
      p.value().copy_(t);
    }
  }
}

}  // namespace

std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module) {
  std::unordered_set<const void*> seen;
  std::vector<at::Tensor> out;
  for (const auto& p : module.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

void save_checkpoint(const std::string& path, const Transformer& model, const OptimizerState* optimizer,
                     const CheckpointMeta& meta) {
  Dict dict = new_dict();
  dict.insert("format", std::string(kFormat));
  dict.insert("format_version", kFormatVersion);
  dict.insert("model_config", meta.model.to_json());
  dict.insert("train_config", meta.train_config);
  dict.insert("src_spm_path", meta.src_spm_path);
  dict.insert("src_spm_checksum", meta.src_spm_checksum);
  dict.insert("src_spm_model", bytes_to_tensor(meta.src_spm_model));
  dict.insert("tgt_spm_path", meta.tgt_spm_path);
  dict.insert("tgt_spm_checksum", meta.tgt_spm_checksum);
  dict.insert("tgt_spm_model", bytes_to_tensor(meta.tgt_spm_model));
  if (!meta.vocabulary.empty()) dict.insert("vocabulary", meta.vocabulary);
  if (!meta.source_language.empty()) dict.insert("source_language", meta.source_language);
  if (!meta.target_language.empty()) dict.insert("target_language", meta.target_language);
  if (!meta.language_identifier.empty()) dict.insert("language_identifier", bytes_to_tensor(meta.language_identifier));
  if (meta.both_directions) dict.insert("both_directions", true);
  const int64_t vocab = meta.model.tgt_vocab_size;
  if (!meta.target_columns.empty()) dict.insert("target_columns", bytes_to_tensor(columns_to_mask(meta.target_columns, vocab)));
  if (!meta.source_columns.empty()) dict.insert("source_columns", bytes_to_tensor(columns_to_mask(meta.source_columns, vocab)));

  Dict position = new_dict();
  position.insert("step", meta.position.step);
  position.insert("epoch", meta.position.epoch);
  position.insert("batch_index", meta.position.batch_index);
  position.insert("best_bleu", meta.position.best_bleu);
  position.insert("best_loss", meta.position.best_loss);
  position.insert("train_seconds", meta.position.train_seconds);
  dict.insert("position", position);

  c10::Dict<std::string, at::Tensor> weights;
  // One host copy per parameter: tied weights (one tensor under three names) stay one storage,
  // which the archive writes once; a copy per name from a GPU wrote it three times.
  std::unordered_map<const c10::TensorImpl*, at::Tensor> host;
  for (const auto& p : model->named_parameters()) {
    auto& copy = host[p.value().unsafeGetTensorImpl()];
    if (!copy.defined()) copy = p.value().detach().to(torch::kCPU);
    weights.insert(p.key(), copy);
  }
  dict.insert("model", weights);

  if (optimizer) {
    auto to_list = [](const std::vector<at::Tensor>& v) {
      c10::List<at::Tensor> list;
      for (const auto& t : v) list.push_back(t.detach().to(torch::kCPU));
      return list;
    };
    Dict opt = new_dict();
    opt.insert("exp_avg", to_list(optimizer->exp_avg));
    opt.insert("exp_avg_sq", to_list(optimizer->exp_avg_sq));
    opt.insert("steps", to_list(optimizer->steps));
    if (!optimizer->ema.empty()) opt.insert("ema", to_list(optimizer->ema));
    if (optimizer->loss_scale.defined()) {
      opt.insert("loss_scale", optimizer->loss_scale.detach().to(torch::kCPU));
      opt.insert("growth_tracker", optimizer->growth_tracker.detach().to(torch::kCPU));
    }
    dict.insert("optimizer", opt);
    // RNG states: dropout masks after a resume continue the same stream.
    Dict rng = new_dict();
    rng.insert("cpu", at::globalContext().defaultGenerator(c10::Device(c10::kCPU)).get_state());
    if (torch::cuda::is_available()) {
      c10::List<at::Tensor> cuda_states;
      for (size_t i = 0; i < static_cast<size_t>(torch::cuda::device_count()); ++i)
        cuda_states.push_back(
            at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))).get_state());
      rng.insert("cuda", cuda_states);
    }
    dict.insert("rng", rng);
  }
  const auto bytes = torch::pickle_save(c10::IValue(dict));
  atomic_write(path, seal_zip(std::string(bytes.data(), bytes.size())));
}

namespace {

// A field of the wrong type or a missing entry (only in an unsealed file: a sealed one is what
// torchmt wrote) is LibTorch's c10::Error, several lines long: one line naming the file instead.
template <typename F>
auto reading(const std::string& path, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    throw DamagedFileError("checkpoint " + path + " is malformed (" + first_line(e.what_without_backtrace()) + ")");
  } catch (const std::bad_alloc&) {  // a model configuration larger than this machine's memory
    throw std::runtime_error("checkpoint " + path + " needs more memory than this machine has");
  }
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& path, const c10::Device& device) {
  return load_checkpoint(ModelFile::read(path, "checkpoint"), device);
}

LoadedCheckpoint load_checkpoint(const ModelFile& file, const c10::Device& device, WeightMemory memory) {
  const std::string& path = file.path();
  Dict dict = read_checkpoint_dict(file, memory);
  return reading(path, [&] {
    LoadedCheckpoint out;
    out.meta = read_meta(dict, path);
    {
      SkipParameterInit no_random_draws;  // load_weights overwrites every parameter
      out.model = Transformer(out.meta.model);
    }
    load_weights(dict, out.model, path);
    out.model->to(device);
    out.model->eval();
    return out;
  });
}

namespace {
std::string direction_text(const CheckpointMeta& meta) {
  const auto code = [](const std::string& c) { return c.empty() ? std::string("?") : c; };
  return code(meta.source_language) + "->" + code(meta.target_language);
}
}  // namespace

LoadedCheckpoint average_checkpoints(const std::vector<std::string>& paths) {
  if (paths.empty()) throw std::invalid_argument("no checkpoints to average");
  auto first = load_checkpoint(paths[0], torch::kCPU);
  torch::NoGradGuard no_grad;
  auto params = unique_parameters(*first.model);
  for (size_t i = 1; i < paths.size(); ++i) {
    auto other = load_checkpoint(paths[i], torch::kCPU);
    if (const std::string d = other.meta.model.shape_differences(first.meta.model); !d.empty())
      throw std::runtime_error(paths[i] + " has a different model shape than " + paths[0] + " (" + d + ")");
    if (other.meta.src_spm_checksum != first.meta.src_spm_checksum ||
        other.meta.tgt_spm_checksum != first.meta.tgt_spm_checksum)
      throw std::runtime_error(paths[i] + " was trained with a different tokenizer than " + paths[0]);
    // A joint vocabulary's two directions have one shape and one tokenizer: their average is noise.
    if (other.meta.source_language != first.meta.source_language ||
        other.meta.target_language != first.meta.target_language)
      throw std::runtime_error(paths[i] + " translates " + direction_text(other.meta) + ", " + paths[0] + " " +
                               direction_text(first.meta));
    auto other_params = unique_parameters(*other.model);
    for (size_t j = 0; j < params.size(); ++j) params[j].add_(other_params[j]);
  }
  for (auto& p : params) p.div_(static_cast<double>(paths.size()));
  return first;
}

CheckpointMeta restore_training_state(const std::string& path, Transformer& model, OptimizerState& optimizer) {
  Dict dict = read_checkpoint_dict(ModelFile::read(path, "checkpoint"));
  return reading(path, [&] {
    CheckpointMeta meta = read_meta(dict, path);
    if (const std::string d = meta.model.shape_differences(model->config()); !d.empty())
      throw std::runtime_error("checkpoint " + path + " holds a different model than the one configured (" + d +
                               "): resume with the run's own model options");
    load_weights(dict, model, path);
    if (!dict.contains("optimizer")) throw std::runtime_error("checkpoint " + path + " has no optimizer state to resume");
    auto opt = dict.at("optimizer").toGenericDict();
    torch::NoGradGuard no_grad;
    auto restore = [&](const char* key, std::vector<at::Tensor>& into) {
      auto list = opt.at(key).toTensorList();
      if (list.size() != into.size()) throw std::runtime_error("checkpoint " + path + ": optimizer state does not match");
      for (size_t i = 0; i < into.size(); ++i) into[i].copy_(list.get(i));
    };
    restore("exp_avg", optimizer.exp_avg);
    restore("exp_avg_sq", optimizer.exp_avg_sq);
    restore("steps", optimizer.steps);
    if (!optimizer.ema.empty()) {
      if (opt.contains("ema")) {
        restore("ema", optimizer.ema);
      } else {  // a run that starts averaging on resume: from the weights it resumes with
        const auto params = unique_parameters(*model);
        if (params.size() != optimizer.ema.size()) throw std::runtime_error("checkpoint " + path + ": weight average does not match");
        for (size_t i = 0; i < params.size(); ++i) optimizer.ema[i].copy_(params[i]);
      }
    }
    // fp16: the scale the run had (a run saved without fp16 keeps the one it was given).
    if (optimizer.loss_scale.defined() && opt.contains("loss_scale") && opt.contains("growth_tracker")) {
      optimizer.loss_scale.copy_(opt.at("loss_scale").toTensor());
      optimizer.growth_tracker.copy_(opt.at("growth_tracker").toTensor());
    }
    auto rng = dict.at("rng").toGenericDict();
    // Generators are handles: a copy sets the state of the default generator itself.
    at::Generator cpu_gen = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
    cpu_gen.set_state(rng.at("cpu").toTensor());
    if (rng.contains("cuda") && torch::cuda::is_available()) {
      auto states = rng.at("cuda").toTensorList();
      for (size_t i = 0; i < states.size() && i < static_cast<size_t>(torch::cuda::device_count()); ++i) {
        at::Generator gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
        gen.set_state(states.get(i));
      }
    }
    return meta;
  });
}

}  // namespace torchmt
