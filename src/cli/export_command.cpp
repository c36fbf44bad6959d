// torchmt export: a checkpoint -> one deployable file (TorchScript archive with the
// SentencePiece model and the configuration embedded). See torchmt/export/.
#include <filesystem>
#include <iostream>

#include <torch/torch.h>

#include "cli_options.h"
#include "torchmt/export/exporter.h"
#include "torchmt/io/checkpoint.h"

namespace torchmt::cli {
namespace {

struct ExportCommandOptions {
  std::string model, output;
  std::string dtype = "fp32";
  bool freeze = false;
  std::string format = "torchscript";
};

const OptionTable<ExportCommandOptions>& export_option_table() {
  using O = ExportCommandOptions;
  static const auto table = OptionTable<O>("export")
      .add("model", &O::model, "checkpoint to export (e.g. RUN_DIR/checkpoint_best.pt)", {"m", "", {}})
      .add("output", &O::output, "file to write (e.g. model.ts)", {"o", "", {}})
      .add("dtype", &O::dtype, "weights as fp32, bf16 or fp16")
      .add("freeze", &O::freeze,
           "fold weights into the code and apply TorchScript inference optimisations (no state dict)")
      .add("format", &O::format, "export format");
  return table;
}

int run_export(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(export_option_table(),
                         "Export a checkpoint as one TorchScript file (weights, SentencePiece model, config) that "
                         "C++ (torch::jit::load, `torchmt translate -m model.ts`) and Python (torch.jit.load) load.",
                         argc, argv, code);
  if (!o) return code;
  ExportOptions export_options;
  std::unique_ptr<ModelExporter> exporter;
  const bool usable = check_usage(
      [&] {
        if (o->model.empty()) throw std::invalid_argument("missing required option -m/--model");
        if (o->output.empty()) throw std::invalid_argument("missing required option -o/--output");
        export_options.dtype = parse_export_dtype(o->dtype);
        exporter = make_exporter(o->format);
      },
      argv[0]);
  if (!usable) return kExitUsage;
  export_options.freeze = o->freeze;
  const std::string& input = o->model;
  const std::string& output = o->output;

  auto checkpoint = load_checkpoint(input, torch::kCPU);
  exporter->write(checkpoint, export_options, output);
  const auto& c = checkpoint.meta.model;
  std::cerr << "exported " << input << " (step " << checkpoint.meta.position.step << ", " << c.num_encoder_layers
            << "+" << c.num_decoder_layers << " layers, d_model " << c.d_model << ") to " << output << " ("
            << exporter->format() << ", " << o->dtype
            << (export_options.freeze ? ", frozen" : "") << ", " << std::filesystem::file_size(output) / 1024
            << " KiB)\n";
  return kExitOk;
}

const CommandRegistration registration({"export", "export a checkpoint as one TorchScript file for deployment",
                                        run_export, 50});

}  // namespace
}  // namespace torchmt::cli
