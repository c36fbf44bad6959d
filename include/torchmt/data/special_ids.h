#pragma once
// Special token ids, fixed in every SentencePiece model torchmt trains, so a checkpoint,
// a batch and a decoder agree on them without consulting the tokenizer.
#include <cstdint>

namespace torchmt {

constexpr int64_t kPadId = 0;
constexpr int64_t kUnkId = 1;
constexpr int64_t kBosId = 2;
constexpr int64_t kEosId = 3;

}  // namespace torchmt
