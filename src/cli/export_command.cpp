// torchmt export: a checkpoint -> one deployable file (TorchScript archive with the
// SentencePiece model and the configuration embedded). See torchmt/export/.
#include <filesystem>
#include <iostream>

#include <torch/torch.h>

#include "cli_options.h"
#include "util/atomic_file.h"
#include "data/text_file.h"
#include "export/calibration.h"
#include "export/exporter.h"
#include "io/checkpoint.h"
#include "util/utf8.h"

namespace torchmt::cli {
namespace {

// A file's size, or the sum of a directory's files.
uintmax_t disk_size(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) return fs::file_size(path);
  uintmax_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(path))
    if (entry.is_regular_file()) total += entry.file_size();
  return total;
}

struct ExportCommandOptions {
  std::string model, output;
  std::string dtype = "fp32";
  bool freeze = false;
  std::string format = "torchscript";
  std::string quantization = "none";
  std::string calibrate;
};

const OptionTable<ExportCommandOptions>& export_option_table() {
  using O = ExportCommandOptions;
  static const auto table = OptionTable<O>("export")
      .add("model", &O::model, "checkpoint to export (e.g. RUN_DIR/checkpoint_best.pt)", {"m", "", {}})
      .add("output", &O::output, "file to write (e.g. model.ts), or directory for --format ctranslate2 / marian", {"o", "", {}})
      .add("dtype", &O::dtype,
           "weights as fp32, bf16, fp16, or int8 (the same as --quantization int8: a model about 4x smaller "
           "than fp32, which `torchmt translate` runs with int8 kernels)")
      .add("freeze", &O::freeze,
           "fold weights into the code and apply TorchScript inference optimisations (no state dict)")
      .add("format", &O::format, "export format: torchscript, ctranslate2 (a CTranslate2 model directory), marian (a Hugging "
           "Face MarianMT directory for transformers) or onnx (encoder and decoder-step graphs for ONNX Runtime)")
      .add("quantization", &O::quantization,
           "none, or int8: Linear and embedding weights as int8 with per-row scales, the rest fp32")
      .add("calibrate", &O::calibrate,
           "static int8: source sentences, one per line (e.g. 200 from the validation set), translated to fix every "
           "Linear's input range; --format onnx writes QuantizeLinear/DequantizeLinear pairs, --format torchscript "
           "the ranges, which `translate --dtype int8` then uses instead of each row's own");
  return table;
}

int run_export(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(export_option_table(),
                         "Export a checkpoint as one TorchScript file (weights, SentencePiece model, config) that "
                         "C++ (torch::jit::load, `torchmt translate -m model.ts`) and Python (torch.jit.load) load, or "
                         "as a CTranslate2, Hugging Face Marian or ONNX directory (--format).",
                         argc, argv, code);
  if (!o) return code;
  ExportOptions export_options;
  std::unique_ptr<ModelExporter> exporter;
  const bool usable = check_usage(
      [&] {
        if (o->model.empty()) throw std::invalid_argument("missing required option -m/--model");
        if (o->output.empty()) throw std::invalid_argument("missing required option -o/--output");
        if (auto clash = same_file_twice({{"-m/--model", o->model}, {"--calibrate", o->calibrate}},
                                         {{"-o/--output", o->output}}))
          throw std::invalid_argument(*clash);
        const bool int8_dtype = o->dtype == "int8";
        export_options.dtype = int8_dtype ? c10::ScalarType::Float : parse_export_dtype(o->dtype);
        exporter = make_exporter(o->format);
        if (o->quantization != "none" && o->quantization != "int8")
          throw std::invalid_argument("unknown --quantization '" + o->quantization + "' (expected none or int8)");
        if (o->quantization == "int8" && !int8_dtype && export_options.dtype != c10::ScalarType::Float)
          throw std::invalid_argument("--quantization int8 keeps the other weights in fp32 (drop --dtype " + o->dtype + ")");
        export_options.quantize_int8 = int8_dtype || o->quantization == "int8";
        export_options.freeze = o->freeze;
        if (!o->calibrate.empty()) {
          if (exporter->format() != "onnx" && exporter->format() != "torchscript")
            throw std::invalid_argument("--calibrate (static int8) is an option of --format onnx and torchscript");
          if (!std::filesystem::is_regular_file(o->calibrate))
            throw std::invalid_argument("--calibrate " + o->calibrate + ": no such file");
          // ONNX: int8 comes with the ranges calibrated below; TorchScript keeps --dtype's weights
          // and `translate --dtype int8` quantizes inputs over the ranges.
          if (exporter->format() == "onnx") export_options.quantize_int8 = false;
        }
        exporter->check_options(export_options);
        if (export_options.freeze && export_options.quantize_int8)
          throw std::invalid_argument("--freeze would fold the int8 weights back into float constants; drop --freeze");
      },
      argv[0]);
  if (!usable) return kExitUsage;
  const std::string& input = o->model;
  const std::string& output = o->output;

  auto checkpoint = load_checkpoint(input, torch::kCPU);
  if (!o->calibrate.empty()) {
    auto lines = read_lines(o->calibrate);
    for (size_t i = 0; i < lines.size(); ++i)
      if (const auto bad = find_invalid_utf8(lines[i]))
        throw std::runtime_error(o->calibrate + " line " + std::to_string(i + 1) + ": invalid UTF-8 at byte " +
                                 std::to_string(*bad));
    const auto calibration = calibrate_activation_ranges(checkpoint, lines);
    export_options.activation_ranges = calibration.ranges;
    std::cerr << "calibrated " << calibration.ranges.size() << " Linear inputs on " << calibration.sentences
              << " sentences (" << calibration.source_tokens << " source, " << calibration.target_tokens
              << " target tokens)\n";
  }
  exporter->write(checkpoint, export_options, output);
  std::string precision = export_options.quantize_int8 ? "int8 weights" : o->dtype;
  if (!export_options.activation_ranges.empty())
    precision = exporter->format() == "onnx" ? "static int8" : precision + ", static int8 input ranges";
  const auto& c = checkpoint.meta.model;
  std::cerr << "exported " << input << " (step " << checkpoint.meta.position.step << ", " << c.num_encoder_layers
            << "+" << c.num_decoder_layers << " layers, d_model " << c.d_model << ") to " << output << " ("
            << exporter->format() << ", " << precision << (export_options.freeze ? ", frozen" : "")
            << ", " << disk_size(output) / 1024 << " KiB)\n";
  return kExitOk;
}

const CommandRegistration export_registration({"export", "export a checkpoint for deployment (TorchScript file; CTranslate2, Marian or ONNX directory)",
                                        run_export, 50});

}  // namespace
}  // namespace torchmt::cli
