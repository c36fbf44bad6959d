#pragma once
// Special token ids, fixed in every SentencePiece model torchmt trains, so a checkpoint,
// a batch and a decoder agree on them without consulting the tokenizer. A model imported
// with an explicit vocabulary (Marian's vocab.json) carries its own in its configuration.
#include <cstdint>

namespace torchmt {

constexpr int64_t kPadId = 0;
constexpr int64_t kUnkId = 1;
constexpr int64_t kBosId = 2;
constexpr int64_t kEosId = 3;

// A model's special ids: torchmt's own above, or an imported model's (ModelConfig::special_ids).
struct SpecialIds {
  int64_t pad = kPadId, unk = kUnkId, bos = kBosId, eos = kEosId;
  bool operator==(const SpecialIds& o) const { return pad == o.pad && unk == o.unk && bos == o.bos && eos == o.eos; }
  bool operator!=(const SpecialIds& o) const { return !(*this == o); }
};

}  // namespace torchmt
