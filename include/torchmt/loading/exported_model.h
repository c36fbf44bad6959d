#pragma once
// Reading a TorchScript export back in C++ (what `torchmt translate -m model.ts` uses).
//
//   ExportedModel model(ModelFile::read(path), device);   // torch::jit::load + the extra files;
//   ExportedModel model(path, device);                    // throws std::runtime_error ("... is
//                                        // not a torchmt export", corrupt, newer format) naming path
//   model.decoder()     an IncrementalDecoder over the archive's start / step / select /
//                       reorder methods: torchmt's own search runs on it, so an export
//                       translates through the same Translator and search as a checkpoint
//   model.translate_in_archive(src, options)
//                       the archive's own `translate_with_scores` (the search Python users
//                       call), best hypothesis per row; for parity tests
// Thread-compatible (one model per thread); calls run under NoGradGuard.
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "torchmt/data/language_identifier.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/decoding/search.h"
#include "torchmt/decoding/incremental_decoder.h"
#include "torchmt/io/model_file.h"
#include "torchmt/model/model_config.h"
#include "torchmt/model/transformer.h"

namespace torchmt {

// The marker (extra file torchmt.json) an export carries, and the version this torchmt reads
// and writes (export/torchscript_exporter.h). 2: the decoder interface (start / step / select /
// reorder) and the fixed search.
constexpr const char* kTorchScriptFormat = "torchmt-torchscript";
constexpr int64_t kTorchScriptFormatVersion = 2;

class ExportedModel {
 public:
  ExportedModel(const ModelFile& file, const c10::Device& device);
  ExportedModel(const std::string& path, const c10::Device& device);

  std::unique_ptr<IncrementalDecoder> decoder() const;
  SearchResult translate_in_archive(const at::Tensor& src, const SearchOptions& options) const;

  const Tokenizer& tokenizer() const;
  const Tokenizer& target_tokenizer() const;
  const ModelLanguages& languages() const;  // as the checkpoint recorded them  // tgt_spm.model when the export has one, else tokenizer()
  const ModelConfig& config() const;
  c10::Device device() const;
  std::string dtype() const;  // "fp32" | "bf16" | "fp16" | "int8" as exported
  bool frozen() const;
  // The native model with the archive's weights (int8 ones dequantized), on the CPU: what
  // `translate --dtype int8` quantizes for its kernels. Not for frozen exports (no weights).
  Transformer native_model() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace torchmt
