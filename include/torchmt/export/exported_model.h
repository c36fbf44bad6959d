#pragma once
// Reading a TorchScript export back in C++ (what `torchmt translate -m model.ts` uses).
//
//   bool is_torchscript_export(path)
//       true when `path` is a zip archive carrying the extra file torchmt.json (cheap: reads
//       the zip directory only; never throws). A checkpoint is a zip too, but has no marker.
//   ExportedModel model(path, device);   // torch::jit::load + the extra files; throws
//                                        // std::runtime_error ("... is not a torchmt
//                                        // export", corrupt, newer format) naming path
//   model.decoder()     an IncrementalDecoder over the archive's start / step / select /
//                       reorder methods: torchmt's own search runs on it, so an export
//                       translates through the same Translator and search as a checkpoint
//   model.translate_in_archive(src, options)
//                       the archive's own `translate_with_scores` (the search Python users
//                       call), best hypothesis per row; for parity tests
//   load_translator(path, device, dtype)
//                       a Translator for a checkpoint or an export, chosen by content
//   load_translator(TranslatorConfig)
//                       the same from what a user configured (validated; the translator's
//                       threads, not the process's);
//                       int8 (`--dtype int8`, or an int8 export at `--dtype auto`) runs the
//                       native model with int8 kernels, for checkpoints and exports alike
//   seal_model_file(path)
//                       adds the checksum to a file of torchmt 0.2 or earlier
// Thread-compatible (one model per thread); calls run under NoGradGuard.
#include <memory>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "torchmt/data/tokenizer.h"
#include "torchmt/decoding/search.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/model/model_config.h"
#include "torchmt/model/transformer.h"

namespace torchmt {

bool is_torchscript_export(const std::string& path);

class ExportedModel {
 public:
  ExportedModel(const std::string& path, const c10::Device& device);

  std::unique_ptr<IncrementalDecoder> decoder() const;
  SearchResult translate_in_archive(const at::Tensor& src, const SearchOptions& options) const;

  const Tokenizer& tokenizer() const;
  const Tokenizer& target_tokenizer() const;  // tgt_spm.model when the export has one, else tokenizer()
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

// A Translator over an export (dtype: the autocast precision of the decoding, as for a
// checkpoint; the stored weights keep the export's dtype).
Translator make_translator(const ExportedModel& model, c10::ScalarType dtype);
// A checkpoint or a TorchScript export, by content (not by file name).
Translator load_translator(const std::string& path, const c10::Device& device, c10::ScalarType dtype);
// Validates `config` (std::invalid_argument naming the flag) and opens config.model on its
// device in its precision, translating on config.threads CPU threads where set.
Translator load_translator(const TranslatorConfig& config);

// `torchmt seal`: a checkpoint or export written before torchmt sealed its files gets its seal,
// once it has loaded in full as it is (the file is replaced atomically; one that does not load
// is left untouched and the error names it). A sealed file is verified and left as it is.
enum class SealOutcome { kAlreadySealed, kSealed };
SealOutcome seal_model_file(const std::string& path);

}  // namespace torchmt
