#pragma once
// Which pieces a --both-directions model may write: the target language's when it translates
// from the source language, the source language's the other way (ModelLanguages::target_columns,
// source_columns, recorded by train). One output layer holds both languages' pieces, and a German
// article now and then began an English translation ("Eine Person with a red backpack"). Which way a
// sentence goes is read from its own pieces: those that only one language's training text holds.
#include <cstdint>
#include <memory>
#include <vector>

#include "torchmt/data/language_identifier.h"

namespace torchmt {

class OutputLanguages {
 public:
  // Null unless the model records both ways' columns; std::invalid_argument for ids outside
  // [0, vocab) or unsorted lists.
  static std::shared_ptr<const OutputLanguages> of(const ModelLanguages& languages, int64_t vocab);
  // Every sentence into `columns` (sorted ids): a one-direction model's open output columns.
  static std::shared_ptr<const OutputLanguages> only(std::vector<int64_t> columns);

  // The columns a translation of `source_ids` may use: the target language's when more of its
  // pieces belong to the source language's text alone than to the target language's alone, the
  // source language's when fewer, null (every column) when as many.
  const std::vector<int64_t>* columns_for(const std::vector<int64_t>& source_ids) const;
  // The same reading as a number: +1 into the target language, -1 into the source language, 0 any.
  int way(const std::vector<int64_t>& source_ids) const;

 private:
  std::vector<int64_t> target_, source_;
  std::vector<int8_t> side_;  // per piece: +1 in source-language text only, -1 in target-language text only;
                              // empty: one way (only())
};

// A sentence's vocabulary (SentenceSteering::vocabulary) within a language's columns: the
// `candidates` (a shortlist's; empty: every piece) that `language` holds, and `extra` (a prefix's
// and the constraints' pieces, which the output holds whatever their language). Sorted.
std::vector<int64_t> within_language(const std::vector<int64_t>& candidates, const std::vector<int64_t>& language,
                                     std::vector<int64_t> extra);

}  // namespace torchmt
