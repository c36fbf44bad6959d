#include "torchmt/export/exporter.h"

#include <stdexcept>

#include "torchmt/export/ctranslate2_exporter.h"
#include "torchmt/export/marian_format.h"
#include "torchmt/export/torchscript_exporter.h"

namespace torchmt {

std::unique_ptr<ModelExporter> make_exporter(const std::string& format) {
  if (format == "torchscript" || format == "ts") return std::make_unique<TorchScriptExporter>();
  if (format == "ctranslate2" || format == "ct2") return std::make_unique<CTranslate2Exporter>();
  if (format == "marian") return std::make_unique<MarianExporter>();
  throw std::invalid_argument("unknown export format '" + format + "' (expected torchscript, ctranslate2 or marian)");
}

std::vector<std::string> export_formats() { return {"torchscript", "ctranslate2", "marian"}; }

c10::ScalarType parse_export_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return c10::ScalarType::Float;
  if (name == "bf16" || name == "bfloat16") return c10::ScalarType::BFloat16;
  if (name == "fp16" || name == "float16") return c10::ScalarType::Half;
  throw std::invalid_argument("unknown export dtype '" + name + "' (expected fp32, bf16 or fp16)");
}

}  // namespace torchmt
