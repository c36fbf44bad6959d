#pragma once
// Hugging Face's MarianMT format (the OPUS-MT models): a directory with config.json, the weights
// (model.safetensors or pytorch_model.bin), vocab.json and the source.spm / target.spm
// SentencePiece models. Imported into a torchmt checkpoint (import_marian) and written from one
// (MarianExporter, `export --format marian`).
//
// The two models are the same computation: Marian's Post-LN layers are torchmt's paper layers
// (q/k/v/out_proj = W_q/W_k/W_v/W_o, fc1/fc2 = linear1/linear2, the layer norms = norm1..3),
// final_logits_bias is fc_out's bias, and vocab.json becomes the checkpoint's explicit
// Vocabulary with Marian's special ids. Marian's sinusoidal table puts all sines before all
// cosines where the paper's (torchmt's) interleaves them; the model dimension is permuted on
// import (sine k -> 2k, cosine k -> 2k + 1) and back on export, which leaves every output equal.
#include <string>

#include "export/exporter.h"
#include "io/checkpoint.h"

namespace torchmt {

// Reads a MarianMT directory. Throws std::runtime_error naming the file and field for a
// missing or malformed file, a configuration torchmt cannot express (the field named), sizes
// beyond what its weights file holds (checked before anything is allocated), and weights whose
// names or shapes do not match the configuration.
LoadedCheckpoint import_marian(const std::string& directory);

class MarianExporter : public ModelExporter {
 public:
  std::string format() const override { return "marian"; }
  // The paper's configuration (Post-LN, sinusoidal positions, multi-head attention, dense FFN,
  // even d_model) with one vocabulary (joint, or an explicit one); anything else is a
  // std::invalid_argument naming the option. fp32 weights only.
  void write(const LoadedCheckpoint& checkpoint, const ExportOptions& options, const std::string& path) override;
};

}  // namespace torchmt
