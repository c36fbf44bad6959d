// torchmt import: a model in another toolkit's format -> a torchmt checkpoint that every command
// uses (translate, serve, evaluate, export, train --init-from). See torchmt/export/marian_format.h.
#include <chrono>
#include <iostream>

#include "cli_options.h"
#include "util/atomic_file.h"
#include "export/marian_format.h"
#include "io/checkpoint.h"

namespace torchmt::cli {
namespace {

struct ImportCommandOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string format = "marian";
};

const OptionTable<ImportCommandOptions>& import_option_table() {
  using O = ImportCommandOptions;
  static const auto table = OptionTable<O>("import")
      .add("inputs", &O::inputs, "the model directory to import (the argument without a flag)")
      .add("output", &O::output, "checkpoint to write (e.g. model.pt)", {"o", "", {}})
      .add("format", &O::format,
           "the directory's format: marian (Hugging Face MarianMT / OPUS-MT: config.json, model.safetensors or "
           "pytorch_model.bin, vocab.json, source.spm, target.spm)");
  return table;
}

int run_import(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(import_option_table(),
                         "Import a model directory as a torchmt checkpoint: torchmt import --format marian DIR -o model.pt",
                         argc, argv, code, "inputs");
  if (!o) return code;
  if (o->inputs.size() != 1) return usage_error(argv[0], "give one model directory to import");
  if (o->output.empty()) return usage_error(argv[0], "missing required option -o/--output");
  if (o->format != "marian") return usage_error(argv[0], "unknown --format '" + o->format + "' (expected marian)");
  if (auto clash = same_file_twice({{"input", o->inputs.front()}}, {{"-o/--output", o->output}}))
    return usage_error(argv[0], *clash);
  const auto start = std::chrono::steady_clock::now();
  const LoadedCheckpoint checkpoint = import_marian(o->inputs[0]);
  save_checkpoint(o->output, checkpoint.model, nullptr, checkpoint.meta);
  const auto& c = checkpoint.meta.model;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "imported " << o->inputs[0] << " (marian: " << c.num_encoder_layers << "+" << c.num_decoder_layers
            << " layers, d_model " << c.d_model << ", " << c.src_vocab_size << " pieces, "
            << count_parameters(checkpoint.model) << " parameters) to " << o->output << " in " << seconds << " s\n";
  return kExitOk;
}

const CommandRegistration import_registration({"import", "import a Hugging Face Marian (OPUS-MT) model as a checkpoint",
                                               run_import, 52});

}  // namespace
}  // namespace torchmt::cli
