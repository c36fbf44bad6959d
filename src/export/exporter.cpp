#include "torchmt/export/exporter.h"

#include <stdexcept>

#include "torchmt/export/torchscript_exporter.h"

namespace torchmt {

std::unique_ptr<ModelExporter> make_exporter(const std::string& format) {
  if (format == "torchscript" || format == "ts") return std::make_unique<TorchScriptExporter>();
  throw std::invalid_argument("unknown export format '" + format + "' (expected torchscript)");
}

std::vector<std::string> export_formats() { return {"torchscript"}; }

c10::ScalarType parse_export_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return c10::ScalarType::Float;
  if (name == "bf16" || name == "bfloat16") return c10::ScalarType::BFloat16;
  if (name == "fp16" || name == "float16") return c10::ScalarType::Half;
  throw std::invalid_argument("unknown export dtype '" + name + "' (expected fp32, bf16 or fp16)");
}

}  // namespace torchmt
