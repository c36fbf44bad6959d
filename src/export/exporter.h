#pragma once
// Deployment export: one file that holds a trained model, its SentencePiece model and its
// configuration. Every format sits behind ModelExporter, so a successor of TorchScript
// (e.g. an AOTInductor package) is a new implementation plus a line in make_exporter().
//
//   auto exporter = make_exporter("torchscript");
//   exporter->write(load_checkpoint(ckpt, torch::kCPU), ExportOptions{}, "model.ts");
//
// Formats today: "torchscript" (TorchScriptExporter, torchmt/export/torchscript_exporter.h;
// read back with ExportedModel / load_translator, torchmt/loading/model_loader.h) and
// "ctranslate2" (CTranslate2Exporter, torchmt/export/ctranslate2_exporter.h: a directory for
// CTranslate2's own runtime), "marian" (a Hugging Face MarianMT directory) and "onnx"
// (OnnxExporter, torchmt/export/onnx_exporter.h: encoder and decoder-step graphs for ONNX Runtime).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/ScalarType.h>

#include "model/linear.h"

namespace torchmt {

struct CheckpointMeta;
struct LoadedCheckpoint;
class Tokenizer;

struct ExportOptions {
  // Floating-point type of the stored weights: kFloat, kBFloat16 or kHalf. Log-probabilities
  // in search are always computed in fp32.
  c10::ScalarType dtype = c10::ScalarType::Float;
  // Fold the weights into the graphs and run the inference optimisations the format offers
  // (TorchScript: torch::jit::freeze + optimize_for_inference). A frozen export has no state
  // dict (the weights are constants of the code).
  bool freeze = false;
  // Weights of every Linear and embedding as int8 with a float scale per output row
  // (CTranslate2 format only, today).
  bool quantize_int8 = false;
  // Static int8 (export --calibrate; ONNX and TorchScript): every Linear's calibrated input range,
  // keyed "<layer>.weight" by the layer's module path (calibrate_activation_ranges, torchmt/export/calibration.h).
  std::map<std::string, ActivationRange> activation_ranges;
};

class ModelExporter {
 public:
  virtual ~ModelExporter() = default;
  virtual std::string format() const = 0;
  // Throws std::invalid_argument (one line) for options the format cannot take; write() checks too.
  virtual void check_options(const ExportOptions& options) const;
  // Writes `checkpoint` (weights, meta.model, meta.*_spm_model) to `path`, atomically
  // (temp file + rename). Throws std::runtime_error naming the file on failure.
  virtual void write(const LoadedCheckpoint& checkpoint, const ExportOptions& options, const std::string& path) = 0;
};

// "torchscript" (also "ts"), "ctranslate2" (also "ct2"), "marian" or "onnx". Throws
// std::invalid_argument for an unknown format.
std::unique_ptr<ModelExporter> make_exporter(const std::string& format);
std::vector<std::string> export_formats();

// An export directory's SentencePiece models, DIR/source.spm and DIR/target.spm (Marian's names;
// both written when the two sides share one model), so the directory tokenizes on its own.
void write_sentencepiece_models(const std::string& dir, const Tokenizer& source, const Tokenizer& target);

// A directory export's languages: the fields for its config.json (source_language and
// target_language, where the checkpoint recorded them), and DIR/language_identifier.bin.
std::vector<std::pair<std::string, std::string>> language_fields(const CheckpointMeta& meta);
void write_language_identifier(const std::string& dir, const CheckpointMeta& meta);

// "fp32" | "bf16" | "fp16" -> scalar type; throws std::invalid_argument otherwise.
c10::ScalarType parse_export_dtype(const std::string& name);

}  // namespace torchmt
