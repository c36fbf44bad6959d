#pragma once
// ONNX export (`torchmt export --format onnx -o DIR`, reference 002's deployment section:
// torch.onnx.export at opset >= 13): two graphs for ONNX Runtime, written from C++ (LibTorch has
// no C++ ONNX exporter) in ONNX's protobuf format (src/export/onnx_graph.h).
//
//   DIR/encoder.onnx  source_ids [batch, source_length] int64
//                       -> source_mask [batch, source_length] bool (true = may attend),
//                          cross_key_i, cross_value_i [batch, kv_heads, source_length, head_dim]
//                          for every decoder layer i: the cross-attention keys/values, once per
//                          sentence
//   DIR/decoder.onnx  one decoding step: tokens [batch] int64 (the previous token; bos first),
//                     source_mask, past_key_i, past_value_i [batch, kv_heads, past_length,
//                     head_dim] (past_length 0 at the first step), cross_key_i, cross_value_i
//                       -> logits [batch, vocab] float, present_key_i, present_value_i (past + 1)
//                     The position is past_length: every row of a batch is at the same step.
//   DIR/config.json   the model's configuration, the special ids, the graphs' names, the search
//                     defaults (beam, length penalty, max_len_a/b) and the files below
//   DIR/source.spm, DIR/target.spm   the SentencePiece models (one file each side, as Marian's)
//   DIR/vocabulary.json              the explicit vocabulary (pieces in id order), where the
//                                    model has one (an imported Marian model)
//
// Opset 17, IR version 8; dynamic batch and length axes; every torchmt configuration: paper and
// Pre-LN, sinusoidal/learned/rotary positions, grouped-query attention, mixture of experts (each
// expert computed for every token and weighted by the top-k gate, which is the same sum).
// With ExportOptions::activation_ranges (export --calibrate) every Linear's input and weight go
// through QuantizeLinear/DequantizeLinear pairs: static int8, input per tensor, weight per output
// channel. tools/onnx_translate.py translates with it using onnxruntime and sentencepiece only.
#include <string>

#include "export/exporter.h"

namespace torchmt {

class OnnxExporter : public ModelExporter {
 public:
  std::string format() const override { return "onnx"; }
  void check_options(const ExportOptions& options) const override;
  void write(const LoadedCheckpoint& checkpoint, const ExportOptions& options, const std::string& path) override;
};

}  // namespace torchmt
