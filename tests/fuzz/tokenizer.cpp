// Fuzz target: the SentencePiece wrapper (data/tokenizer.h). The first byte picks what the
// rest is: text to encode and decode, or ids (two bytes each, any value) to decode and look up.
#include <vector>

#include "fuzz_support.h"
#include "torchmt/data/special_ids.h"
#include "util/utf8.h"

using namespace torchmt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::sample_tokenizer();
  if (size == 0) return 0;
  const std::string rest(fuzz::as_text(data + 1, size - 1));
  if (data[0] % 2 == 0) {
    // Text. Invalid UTF-8 is the caller's to refuse or repair; the wrapper must still not crash.
    const auto ids = tok.encode(rest);
    const auto pieces = tok.encode_pieces(rest);
    FUZZ_CHECK(ids.size() == pieces.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok.vocab_size());
      FUZZ_CHECK(ids[i] != kPadId && ids[i] != kBosId && ids[i] != kEosId);  // "Ids without bos/eos"
      FUZZ_CHECK(tok.piece_to_id(pieces[i]) == ids[i] || ids[i] == kUnkId);
    }
    const std::string decoded = tok.decode(ids);
    if (is_valid_utf8(rest)) {
      FUZZ_CHECK(is_valid_utf8(decoded));
      // Decoding is stable: what a decoded text encodes to decodes to the same text (unless an
      // unknown piece decoded as " ⁇ ", which the NFKC normaliser reads back as "??").
      bool unknown = false;
      for (int64_t id : ids) unknown = unknown || id == kUnkId;
      if (!unknown) FUZZ_CHECK(tok.decode(tok.encode(decoded)) == decoded);
    }
  } else {
    std::vector<int64_t> ids;
    for (size_t i = 1; i + 1 < size; i += 2) ids.push_back(static_cast<int16_t>(data[i] | (data[i + 1] << 8)));
    // Any id decodes (one outside the vocabulary as unknown), to valid UTF-8.
    FUZZ_CHECK(is_valid_utf8(tok.decode(ids)));
    for (int64_t id : ids) {
      try {
        const std::string piece = tok.id_to_piece(id);
        FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
        FUZZ_CHECK(tok.piece_to_id(piece) == id);
        (void)tok.piece_score(id);
      } catch (const std::out_of_range& e) {
        FUZZ_CHECK(id < 0 || id >= tok.vocab_size());
        fuzz::check_error_message(e);
      }
    }
  }
  return 0;
}
