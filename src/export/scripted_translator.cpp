#include "torchmt/export/scripted_translator.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "torchmt/data/special_ids.h"
#include "torchmt/export/script_call.h"
#include "torchmt/export/torchscript_exporter.h"
#include "torchmt/util/flat_json.h"

namespace torchmt {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

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

struct ScriptedTranslator::Impl {
  torch::jit::Module module;
  ModelConfig config;
  Tokenizer src_tok;
  Tokenizer tgt_tok;
  c10::Device device;
  std::string dtype;
  bool frozen = false;
};

ScriptedTranslator::ScriptedTranslator(const std::string& path, const c10::Device& device) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("model not found: " + path);
  if (!is_torchscript_export(path))
    throw std::runtime_error(path + " is not a torchmt export (no torchmt.json in a TorchScript archive; " +
                             "write one with `torchmt export`)");
  torch::jit::ExtraFilesMap extra{{"torchmt.json", ""}, {"config.json", ""}, {"spm.model", ""}, {"tgt_spm.model", ""}};
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, device, extra);
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
  if (!module.find_method("translate"))
    throw std::runtime_error(path + " lacks the translate method (not a torchmt export?)");
  ModelConfig config;
  try {
    config = ModelConfig::from_json(extra["config.json"]);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + " has an invalid config.json: " + e.what());
  }
  if (extra["spm.model"].empty()) throw std::runtime_error(path + " carries no SentencePiece model (spm.model)");
  Tokenizer src = Tokenizer::from_serialized(extra["spm.model"]);
  Tokenizer tgt = extra["tgt_spm.model"].empty() ? src : Tokenizer::from_serialized(extra["tgt_spm.model"]);
  module.eval();
  impl_ = std::make_unique<Impl>(Impl{std::move(module), config, src, tgt, device, marker.get_or("dtype", "fp32"),
                                      marker.get_or("frozen", "false") == "true"});
}

ScriptedTranslator::~ScriptedTranslator() = default;
ScriptedTranslator::ScriptedTranslator(ScriptedTranslator&&) noexcept = default;
ScriptedTranslator& ScriptedTranslator::operator=(ScriptedTranslator&&) noexcept = default;

Tokenizer ScriptedTranslator::tokenizer() const { return impl_->src_tok; }
Tokenizer ScriptedTranslator::target_tokenizer() const { return impl_->tgt_tok; }
const ModelConfig& ScriptedTranslator::config() const { return impl_->config; }
c10::Device ScriptedTranslator::device() const { return impl_->device; }
std::string ScriptedTranslator::dtype() const { return impl_->dtype; }
bool ScriptedTranslator::frozen() const { return impl_->frozen; }

std::vector<int64_t> ScriptedTranslator::encode_source(const std::string& line, bool* truncated) const {
  auto ids = impl_->src_tok.encode(line);
  const auto limit = static_cast<size_t>(impl_->config.max_len - 1);
  const bool cut = ids.size() > limit;
  if (cut) ids.resize(limit);
  if (truncated) *truncated = cut;
  ids.push_back(kEosId);
  return ids;
}

std::vector<std::vector<int64_t>> ScriptedTranslator::translate_ids(
    const std::vector<std::vector<int64_t>>& src_ids_with_eos, int64_t beam, double lenpen, double max_len_a,
    int64_t max_len_b, int64_t batch_size) {
  if (beam < 1) throw std::invalid_argument("beam size must be at least 1");
  std::vector<std::vector<int64_t>> out(src_ids_with_eos.size());
  std::vector<size_t> order;
  for (size_t i = 0; i < src_ids_with_eos.size(); ++i)
    if (!src_ids_with_eos[i].empty()) order.push_back(i);
  // As Translator: longest first, fixed-size batches, so padding (and thus every float) is
  // the same as the native model's.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return src_ids_with_eos[a].size() > src_ids_with_eos[b].size();
  });
  torch::NoGradGuard no_grad;
  // No graph-executor fusion: a fused kernel may round differently from the native ops.
  torch::jit::GraphOptimizerEnabledGuard no_fusion(false);
  const int64_t cap = std::min<int64_t>(1024, impl_->config.max_len);  // SearchOptions::max_len_cap
  const size_t step = static_cast<size_t>(std::max<int64_t>(1, batch_size));
  for (size_t begin = 0; begin < order.size(); begin += step) {
    const size_t end = std::min(order.size(), begin + step);
    const auto longest = static_cast<int64_t>(src_ids_with_eos[order[begin]].size());
    auto src = torch::full({static_cast<int64_t>(end - begin), longest}, kPadId, torch::kLong);  // [B, S]
    auto acc = src.accessor<int64_t, 2>();
    for (size_t r = begin; r < end; ++r) {
      const auto& ids = src_ids_with_eos[order[r]];
      for (size_t j = 0; j < ids.size(); ++j) acc[static_cast<int64_t>(r - begin)][static_cast<int64_t>(j)] = ids[j];
    }
    c10::IValue result;
    try {
      result = run_script_method(impl_->module, "translate",
                                 {src.to(impl_->device), cap, beam, lenpen, max_len_a, max_len_b});
    } catch (const c10::Error& e) {
      throw std::runtime_error("TorchScript translate failed: " + first_line(e.what_without_backtrace()));
    }
    auto rows = result.toList();
    for (size_t r = begin; r < end; ++r) {
      auto ids = rows.get(r - begin).toIntVector();
      out[order[r]] = std::vector<int64_t>(ids.begin(), ids.end());
    }
  }
  return out;
}

std::vector<std::string> ScriptedTranslator::translate_text(const std::vector<std::string>& lines, int64_t beam,
                                                            double lenpen, double max_len_a, int64_t max_len_b,
                                                            int64_t batch_size) {
  std::vector<std::vector<int64_t>> sources(lines.size());
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find_first_not_of(" \t\r") != std::string::npos) sources[i] = encode_source(lines[i]);
  auto ids = translate_ids(sources, beam, lenpen, max_len_a, max_len_b, batch_size);
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const auto& row : ids) out.push_back(impl_->tgt_tok.decode(row));
  return out;
}

}  // namespace torchmt
