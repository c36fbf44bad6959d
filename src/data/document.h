#pragma once
// A text to translate sentence by sentence and to put back together (LibreTranslate's `format`).
//   text: lines; each line is one sentence, or is split into sentences by a SentenceSplitter.
//         Whatever lies between sentences (the original spacing, the newlines) is kept.
//   html: parsed leniently, without recursion. Text between block-level tags (p, div, li, td,
//         br, ... : every tag that is not inline) is a block, split into sentences; entities are
//         decoded for translation and written back as the source spelled them. Tags and their
//         attributes are copied byte for byte. Inline elements (b, i, a, span, em, strong, ...)
//         are put back around the target words aligned to the source words they wrapped
//         (assemble() takes each sentence's word alignment); void inline tags (img), comments and
//         stray tags keep their place next to the aligned word. <script>, <style>, <code>, <pre>,
//         <textarea>, <kbd>, <samp> and elements with translate="no" or class "notranslate" are
//         left alone. Output is well-formed whenever the input is: placed elements nest, an
//         element is never split or repeated.
// Light header: no LibTorch.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "torchmt/data/sentence_splitter.h"
#include "torchmt/data/word_alignment.h"

namespace torchmt {

enum class DocumentFormat { kText, kHtml };
// "text" or "html"; std::invalid_argument naming the value otherwise.
DocumentFormat parse_document_format(const std::string& name);

struct SentenceTranslation {
  std::string text;
  WordAlignment alignment;  // sentence words - text words; read only where needs_alignments()
};

struct TextBlock;

class Document {
 public:
  // `splitter` null: a text line or an HTML block is one sentence. Invalid UTF-8 is the caller's
  // to refuse (the server and the CLI check before).
  Document(std::string_view text, DocumentFormat format, const SentenceSplitter* splitter);

  // What to translate, in order (in HTML with whitespace runs made single spaces).
  const std::vector<std::string>& sentences() const { return sentences_; }
  // Whether assemble() reads the alignments (HTML with inline markup around words).
  bool needs_alignments() const { return needs_alignments_; }
  // The translated document, one translation per sentence (std::invalid_argument otherwise).
  std::string assemble(const std::vector<SentenceTranslation>& translations) const;

  ~Document();
  Document(const Document&);
  Document(Document&&) noexcept;
  Document& operator=(const Document&);
  Document& operator=(Document&&) noexcept;

 private:
  struct Part {
    std::string literal;  // copied as is when block < 0
    int64_t block = -1;
  };
  void add_block(TextBlock block, const SentenceSplitter* splitter);
  void parse_html(std::string_view text, const SentenceSplitter* splitter);
  std::string escape(std::string_view text) const;

  std::vector<Part> parts_;
  std::vector<TextBlock> blocks_;  // data/markup_projection.h
  std::vector<std::string> sentences_;
  std::unordered_map<std::string, std::string> spelled_;  // decoded character -> the entity written
  bool needs_alignments_ = false;
};

// One alignment over concatenated sentences: the word indices of sentence j offset by the words
// of the sentences (and of the translations) before it.
WordAlignment concatenate_alignments(const std::vector<std::string>& sources,
                                     const std::vector<SentenceTranslation>& translations);

}  // namespace torchmt
