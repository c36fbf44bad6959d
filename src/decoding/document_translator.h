#pragma once
// Documents (data/document.h: lines split into sentences, HTML) through a Translator: every
// sentence of every document in one translate() call (one batch plan, so a document's sentences
// translate as they would one per line), word alignments where a document places markup by
// them or the caller asks, and each document put back together.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/document.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/decoding/word_aligner.h"

namespace torchmt {

class Translator;

struct DocumentTranslation {
  std::string text;
  WordAlignment alignment;  // the document's words to its translation's (when asked)
};

// `alignments`: compute every document's alignment (else only where one needs them); a model
// without cross-attention weights (an export) places markup without them (aligns words in
// order) and refuses `alignments` (std::runtime_error).
std::vector<DocumentTranslation> translate_documents(Translator& translator, const std::vector<Document>& documents,
                                                     const TranslationOptions& options,
                                                     const AlignmentOptions& alignment_options, bool alignments,
                                                     const std::function<void(int64_t)>& done = {});

// Word pairs in order (word i to word i * targets / sources): where no attention is available.
WordAlignment monotone_alignment(const std::string& source, const std::string& target);

}  // namespace torchmt
