#pragma once
// CTranslate2 export (`torchmt export --format ctranslate2 [--quantization int8] -o DIR`): a
// model directory CTranslate2 (4.x, binary format 6) loads as it loads its own converters'
// output, so a torchmt model is served by `ctranslate2.Translator(DIR)` unchanged.
//
//   DIR/model.bin              TransformerSpec, revision 7: the weights under CTranslate2's
//                              names (self-attention q/k/v fused into linear_0, cross-attention
//                              k/v into linear_1), pre_norm and the final LayerNorms for Pre-LN,
//                              our sinusoidal or learned table as position_encodings (rotary:
//                              rotary_dim/rotary_interleave/rotary_base per self-attention, and
//                              zeros for the encoder's table, which CTranslate2 always adds),
//                              num_heads_kv for grouped-query attention, tied weights once plus
//                              aliases, int8 weights with per-row weight_scale when quantized
//                              (CTranslate2's own rounding: rint(w * 127/amax))
//   DIR/config.json            special tokens, add_source_eos (torchmt sources end with </s>),
//                              layer_norm_epsilon 1e-5 (torch's)
//   DIR/shared_vocabulary.json the SentencePiece pieces in id order (source_/target_vocabulary
//                              .json when the two sides have their own models)
//   DIR/source.spm, DIR/target.spm the SentencePiece models that tokenize for it
//
// The directory is written beside DIR first and renamed into place: a kill leaves the previous
// export or the new one. An existing DIR that is not a CTranslate2 model is refused.
// Every torchmt model configuration but a mixture of experts (which CTranslate2 has no
// encoder-decoder form of) is expressible; that one is refused with a one-line error.
#include <string>

#include "export/exporter.h"

namespace torchmt {

class CTranslate2Exporter : public ModelExporter {
 public:
  std::string format() const override { return "ctranslate2"; }
  void write(const LoadedCheckpoint& checkpoint, const ExportOptions& options, const std::string& path) override;
};

}  // namespace torchmt
