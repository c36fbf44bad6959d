#include "export/exporter.h"

#include <stdexcept>

#include <filesystem>

#include "torchmt/data/tokenizer.h"
#include "export/ctranslate2_exporter.h"
#include "export/marian_format.h"
#include "export/onnx_exporter.h"
#include "export/torchscript_exporter.h"
#include "io/checkpoint.h"
#include "util/atomic_file.h"

namespace torchmt {

std::unique_ptr<ModelExporter> make_exporter(const std::string& format) {
  if (format == "torchscript" || format == "ts") return std::make_unique<TorchScriptExporter>();
  if (format == "ctranslate2" || format == "ct2") return std::make_unique<CTranslate2Exporter>();
  if (format == "marian") return std::make_unique<MarianExporter>();
  if (format == "onnx") return std::make_unique<OnnxExporter>();
  throw std::invalid_argument("unknown export format '" + format + "' (expected torchscript, ctranslate2, marian or onnx)");
}

std::vector<std::string> export_formats() { return {"torchscript", "ctranslate2", "marian", "onnx"}; }

void ModelExporter::check_options(const ExportOptions& options) const {
  if (options.freeze && format() != "torchscript") throw std::invalid_argument("--freeze is a TorchScript option");
  if (!options.activation_ranges.empty() && format() != "onnx" && format() != "torchscript")
    throw std::invalid_argument("static int8 (--calibrate) is written by --format onnx and torchscript only");
}

void write_sentencepiece_models(const std::string& dir, const Tokenizer& source, const Tokenizer& target) {
  atomic_write((std::filesystem::path(dir) / "source.spm").string(), source.serialized());
  atomic_write((std::filesystem::path(dir) / "target.spm").string(), target.serialized());
}

std::vector<std::pair<std::string, std::string>> language_fields(const CheckpointMeta& meta) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (!meta.source_language.empty()) fields.emplace_back("source_language", meta.source_language);
  if (!meta.target_language.empty()) fields.emplace_back("target_language", meta.target_language);
  if (meta.both_directions) fields.emplace_back("both_directions", "true");
  return fields;
}

void write_language_identifier(const std::string& dir, const CheckpointMeta& meta) {
  if (!meta.language_identifier.empty())
    atomic_write((std::filesystem::path(dir) / "language_identifier.bin").string(), meta.language_identifier);
}

c10::ScalarType parse_export_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return c10::ScalarType::Float;
  if (name == "bf16" || name == "bfloat16") return c10::ScalarType::BFloat16;
  if (name == "fp16" || name == "float16") return c10::ScalarType::Half;
  throw std::invalid_argument("unknown export dtype '" + name + "' (expected fp32, bf16 or fp16)");
}

}  // namespace torchmt
