#pragma once
// Reading a TorchScript export back in C++ (what `torchmt translate -m model.ts` uses).
//
// API:
//   bool is_torchscript_export(path)
//       true when `path` is a zip archive carrying the extra file torchmt.json (cheap: reads
//       the zip directory only; never throws). A checkpoint is a zip too, but has no marker.
//   ScriptedTranslator st(path, device);       // torch::jit::load + the extra files; throws
//                                              // std::runtime_error ("... is not a torchmt
//                                              // export", corrupt, newer format) naming path
//   st.tokenizer()          Tokenizer of the embedded spm.model (source side)
//   st.target_tokenizer()   tgt_spm.model when the export has one, else tokenizer()
//   st.config()             the ModelConfig of config.json
//   st.encode_source(line)  pieces + eos, cut to max_len - 1 pieces (as Translator::encode_source)
//   st.translate_ids(src_ids_with_eos, beam, lenpen, max_len_a, max_len_b[, batch_size])
//       best hypothesis ids (no bos/eos) per sentence, in input order. Sentences are sorted
//       longest first and batched `batch_size` at a time exactly as Translator does, so the
//       ids equal those of the native checkpoint (fp32). An empty input row gives an empty row.
//   st.translate_text(lines, beam, ...)  raw text in, detokenized best hypothesis out.
// Thread-compatible (one translator per thread); calls run under NoGradGuard.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "torchmt/data/tokenizer.h"
#include "torchmt/model/model_config.h"

namespace torchmt {

bool is_torchscript_export(const std::string& path);

class ScriptedTranslator {
 public:
  ScriptedTranslator(const std::string& path, const c10::Device& device);
  ~ScriptedTranslator();
  ScriptedTranslator(ScriptedTranslator&&) noexcept;
  ScriptedTranslator& operator=(ScriptedTranslator&&) noexcept;

  std::vector<std::vector<int64_t>> translate_ids(const std::vector<std::vector<int64_t>>& src_ids_with_eos,
                                                  int64_t beam, double lenpen = 0.6, double max_len_a = 1.2,
                                                  int64_t max_len_b = 10, int64_t batch_size = 64);
  std::vector<std::string> translate_text(const std::vector<std::string>& lines, int64_t beam, double lenpen = 0.6,
                                          double max_len_a = 1.2, int64_t max_len_b = 10, int64_t batch_size = 64);
  std::vector<int64_t> encode_source(const std::string& line, bool* truncated = nullptr) const;

  Tokenizer tokenizer() const;
  Tokenizer target_tokenizer() const;
  const ModelConfig& config() const;
  c10::Device device() const;
  std::string dtype() const;  // "fp32" | "bf16" | "fp16" as exported
  bool frozen() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace torchmt
