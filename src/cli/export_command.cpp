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

int run_export(int argc, char** argv) {
  cxxopts::Options options(argv[0],
                           "Export a checkpoint as one TorchScript file (weights, SentencePiece model, config) that "
                           "C++ (torch::jit::load, `torchmt translate -m model.ts`) and Python (torch.jit.load) load.");
  options.add_options()("m,model", "checkpoint to export (e.g. RUN_DIR/checkpoint_best.pt)",
                        cxxopts::value<std::string>())("o,output", "file to write (e.g. model.ts)",
                                                       cxxopts::value<std::string>())(
      "dtype", "weights as fp32, bf16 or fp16", cxxopts::value<std::string>()->default_value("fp32"))(
      "freeze", "fold weights into the code and apply TorchScript inference optimisations (no state dict)")(
      "format", "export format", cxxopts::value<std::string>()->default_value("torchscript"));
  int code = kExitOk;
  auto r = parse_flags(options, argc, argv, code);
  if (!r) return code;
  if (!require_flag(*r, "model", argv[0]) || !require_flag(*r, "output", argv[0])) return kExitUsage;
  ExportOptions export_options;
  std::unique_ptr<ModelExporter> exporter;
  try {
    export_options.dtype = parse_export_dtype((*r)["dtype"].as<std::string>());
    exporter = make_exporter((*r)["format"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    std::cerr << argv[0] << ": " << e.what() << " (see --help)\n";
    return kExitUsage;
  }
  export_options.freeze = r->count("freeze") > 0;
  const auto input = (*r)["model"].as<std::string>();
  const auto output = (*r)["output"].as<std::string>();

  auto checkpoint = load_checkpoint(input, torch::kCPU);
  exporter->write(checkpoint, export_options, output);
  const auto& c = checkpoint.meta.model;
  std::cerr << "exported " << input << " (step " << checkpoint.meta.position.step << ", " << c.num_encoder_layers
            << "+" << c.num_decoder_layers << " layers, d_model " << c.d_model << ") to " << output << " ("
            << exporter->format() << ", " << (*r)["dtype"].as<std::string>()
            << (export_options.freeze ? ", frozen" : "") << ", " << std::filesystem::file_size(output) / 1024
            << " KiB)\n";
  return kExitOk;
}

const CommandRegistration registration({"export", "export a checkpoint as one TorchScript file for deployment",
                                        run_export, 50});

}  // namespace
}  // namespace torchmt::cli
