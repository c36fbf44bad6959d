#include "decoding/document_translator.h"

#include <algorithm>
#include <stdexcept>

#include "torchmt/decoding/translator.h"

namespace torchmt {

WordAlignment monotone_alignment(const std::string& source, const std::string& target) {
  const auto n_src = static_cast<int64_t>(whitespace_words(source).size());
  const auto n_tgt = static_cast<int64_t>(whitespace_words(target).size());
  WordAlignment out;
  if (n_src == 0) return out;
  for (int64_t t = 0; t < n_tgt; ++t)
    out.emplace_back(static_cast<int32_t>(t * n_src / n_tgt), static_cast<int32_t>(t));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<DocumentTranslation> translate_documents(Translator& translator, const std::vector<Document>& documents,
                                                     const TranslationOptions& options,
                                                     const AlignmentOptions& alignment_options, bool alignments,
                                                     const std::function<void(int64_t)>& done) {
  if (alignments && !translator.model())
    throw std::runtime_error("word alignments need one checkpoint (an export or an ensemble has no single cross-attention)");
  std::vector<std::string> sentences;
  std::vector<size_t> first;  // each document's first sentence
  for (const auto& d : documents) {
    first.push_back(sentences.size());
    sentences.insert(sentences.end(), d.sentences().begin(), d.sentences().end());
  }
  first.push_back(sentences.size());
  auto translations = translator.translate(sentences, options, {});
  std::vector<SentenceTranslation> sentence_out(sentences.size());
  std::vector<std::string> to_align;
  std::vector<std::vector<int64_t>> targets;
  std::vector<size_t> aligned_rows;
  for (size_t i = 0; i < documents.size(); ++i) {
    const bool wanted = alignments || documents[i].needs_alignments();
    for (size_t s = first[i]; s < first[i + 1]; ++s) {
      sentence_out[s].text = std::move(translations[s].texts.front());
      if (!wanted) continue;
      if (!translator.model()) {
        sentence_out[s].alignment = monotone_alignment(sentences[s], sentence_out[s].text);
        continue;
      }
      to_align.push_back(sentences[s]);
      targets.push_back(translations[s].hypotheses.empty() ? std::vector<int64_t>{}
                                                            : translations[s].hypotheses.front().tokens);
      aligned_rows.push_back(s);
    }
  }
  if (!to_align.empty()) {
    auto pairs = align_words(translator, to_align, targets, alignment_options);
    for (size_t k = 0; k < aligned_rows.size(); ++k) sentence_out[aligned_rows[k]].alignment = std::move(pairs[k]);
  }
  std::vector<DocumentTranslation> out(documents.size());
  for (size_t i = 0; i < documents.size(); ++i) {
    const std::vector<SentenceTranslation> mine(sentence_out.begin() + static_cast<std::ptrdiff_t>(first[i]),
                                                sentence_out.begin() + static_cast<std::ptrdiff_t>(first[i + 1]));
    out[i].text = documents[i].assemble(mine);
    if (alignments) out[i].alignment = concatenate_alignments(documents[i].sentences(), mine);
    if (done) done(1);
  }
  return out;
}

}  // namespace torchmt
