#pragma once
// TorchScript export (`torchmt export`, format "torchscript"): a torch::jit::Module built in
// C++ whose methods are TorchScript source (src/export/torchscript_source.h), holding the
// trained weights under the native model's state-dict names, saved as one zip archive.
//
// Methods of the archive (src/tgt are int64 token ids, padded with 0; sources end with eos 3):
//   forward(src [B,S], tgt_in [B,T]) -> logits [B,T,V]     (padding + causal masks from pad 0)
//   encode(src [B,S]) -> memory [B,S,D]
//   translate(src, max_len=1024, beam=1, lenpen=0.6, max_len_a=1.2, max_len_b=10)
//       -> List[List[int]]: the best hypothesis per row, without bos/eos. Greedy when beam == 1,
//          beam search otherwise; incremental decoding with a per-layer self-attention K/V cache
//          and cross-attention K/V computed once. Same algorithm, tie-breaking and limits as
//          torchmt::search (src/decoding/search.cpp): target length <= max(1, min(int(a*|src|+b),
//          min(max_len, model max_positions))); max_len caps the output length, GNMT length penalty ((5+len)/6)^lenpen.
//   translate_with_scores(same arguments) -> (ids, length-normalised scores)
// Extra files (torch::jit::ExtraFilesMap / Python's _extra_files):
//   torchmt.json  {"format": "torchmt-torchscript", "format_version": 1, "dtype", "frozen", ...}
//   config.json   ModelConfig::to_json()
//   spm.model     the (source) SentencePiece model proto; tgt_spm.model only when it differs
//
// TorchScript headers stay in src/export/ (this header needs none).
#include <string>

#include "export/exporter.h"
#include "torchmt/loading/exported_model.h"  // the format's name and version, which the reader checks

namespace torch::jit {
struct Module;
}

namespace torchmt {

// Adds the in-archive search (greedy, beam_search, translate, translate_with_scores; the
// TorchScript twin of torchmt::search) to `module`, which must have the decoder interface
// (loading/script_call.h) and the int attributes pad_id, bos_id, eos_id and max_positions.
void define_archive_search(torch::jit::Module& module);

class TorchScriptExporter : public ModelExporter {
 public:
  std::string format() const override { return "torchscript"; }
  void write(const LoadedCheckpoint& checkpoint, const ExportOptions& options, const std::string& path) override;
};

}  // namespace torchmt
