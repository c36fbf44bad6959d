#pragma once
// Projecting a block's inline markup through word alignments (under Document, data/document.h):
// each element is put back around the target words aligned to the source words it wrapped.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/document.h"

namespace torchmt {

// An inline element or a zero-width item (void tag, comment, stray tag) of an HTML block.
struct InlineMarkup {
  std::string open, close;    // the tags as written; `close` empty for a zero-width item
  size_t begin = 0, end = 0;  // the block text it wraps [begin, end)
  int32_t parent = -1;        // enclosing element (index in the block), -1 = none
  bool paired = false;        // an element with its end tag
};

// A run of text between block-level tags (HTML) or a line (text), translated sentence by sentence.
struct TextBlock {
  std::string text;                 // plain text, entities decoded
  std::vector<TextSpan> spans;      // its sentences in `text`
  size_t first_sentence = 0;        // index of the first in the document's sentences
  std::vector<InlineMarkup> markup; // pre-order: parents before children
  bool html = false;
};

// The block translated: translations[block.first_sentence + j] is the translation of its sentence
// j (its alignment read only where the block has markup), written with `escape` (HTML) and with
// the block's leading, trailing and between-sentence whitespace as in the source.
std::string project_markup(const TextBlock& block, const std::vector<SentenceTranslation>& translations,
                           const std::function<std::string(std::string_view)>& escape);

}  // namespace torchmt
