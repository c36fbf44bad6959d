// Word alignments from the cross-attention and documents through a model (a random tiny one:
// the properties hold whatever it translates; tools/bench/alignment_error measures quality).
#include <gtest/gtest.h>

#include "data_test_support.h"
#include "data/document.h"
#include "decoding/document_translator.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/decoding/word_aligner.h"

namespace torchmt {
namespace {

using test::random_translator;
using test::sample_lines;

// The attention the alignments read: a row per target piece, a distribution over the source
// pieces and eos, the same whatever the batch, and the cross-attention Translator gives alone.
TEST(WordAligner, AttentionVectorsAreTheRowsTheAlignmentsRead) {
  auto translator = random_translator();
  auto lines = sample_lines(8);
  lines.push_back("");
  auto translations = translator.translate(lines, TranslationOptions{});
  std::vector<std::vector<int64_t>> targets;
  for (const auto& t : translations) targets.push_back(t.hypotheses.empty() ? std::vector<int64_t>{} : t.hypotheses[0].tokens);
  const auto vectors = attention_vectors(translator, lines, targets);
  ASSERT_EQ(vectors.size(), lines.size());
  EXPECT_TRUE(vectors.back().empty());
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    const auto source = translator.encode_source(lines[i]);
    ASSERT_EQ(vectors[i].size(), targets[i].size()) << i;
    const auto alone = translator.cross_attention(lines[i], targets[i], -1, -1);  // [T + 1, S]
    for (size_t t = 0; t < targets[i].size(); ++t) {
      ASSERT_EQ(vectors[i][t].size(), source.size());
      double sum = 0;
      for (size_t k = 0; k < source.size(); ++k) {
        sum += vectors[i][t][k];
        EXPECT_NEAR(vectors[i][t][k], alone[static_cast<int64_t>(t)][static_cast<int64_t>(k)].item<float>(), 1e-5);
      }
      EXPECT_NEAR(sum, 1.0, 1e-4);
    }
  }
  const auto one_by_one = attention_vectors(translator, lines, targets, {}, 1);
  for (size_t i = 0; i < lines.size(); ++i)
    for (size_t t = 0; t < vectors[i].size(); ++t)
      for (size_t k = 0; k < vectors[i][t].size(); ++k) EXPECT_NEAR(one_by_one[i][t][k], vectors[i][t][k], 1e-5);
}

TEST(WordAligner, PairsAreWordsOfBothSidesWhateverTheBatch) {
  auto translator = random_translator();
  auto lines = sample_lines(12);
  lines.push_back("");  // blank: no pairs
  auto translations = translator.translate(lines, TranslationOptions{});
  std::vector<std::vector<int64_t>> targets;
  for (const auto& t : translations) targets.push_back(t.hypotheses.empty() ? std::vector<int64_t>{} : t.hypotheses[0].tokens);
  const auto together = align_words(translator, lines, targets);
  ASSERT_EQ(together.size(), lines.size());
  EXPECT_TRUE(together.back().empty());
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    const auto n_src = static_cast<int32_t>(whitespace_words(lines[i]).size());
    const auto n_tgt = static_cast<int32_t>(whitespace_words(translations[i].texts[0]).size());
    std::vector<char> covered(static_cast<size_t>(n_tgt), 0);
    for (const auto& [s, t] : together[i]) {
      ASSERT_TRUE(s >= 0 && s < n_src && t >= 0 && t < n_tgt) << i << ": " << to_pharaoh(together[i]);
      covered[static_cast<size_t>(t)] = 1;
    }
    // Every target word has a source word (each of its pieces attends somewhere).
    for (int32_t t = 0; t < n_tgt; ++t) EXPECT_TRUE(covered[static_cast<size_t>(t)]) << i << " word " << t;
    EXPECT_TRUE(std::is_sorted(together[i].begin(), together[i].end()));
    EXPECT_EQ(align_words(translator, {lines[i]}, {targets[i]})[0], together[i]) << "line " << i;
  }
  EXPECT_EQ(align_words(translator, lines, targets, {}, 1), together);
  AlignmentOptions shifted;
  shifted.shift = true;
  EXPECT_EQ(align_words(translator, lines, targets, shifted).size(), lines.size());
  AlignmentOptions bad;
  bad.layer = 9;
  EXPECT_THROW(align_words(translator, lines, targets, bad), std::invalid_argument);
  bad = {};
  bad.head = 99;
  EXPECT_THROW(align_words(translator, lines, targets, bad), std::invalid_argument);
  EXPECT_THROW(align_words(translator, lines, {}), std::invalid_argument);
}

TEST(DocumentTranslator, ParagraphsTranslateAsTheirSentencesOneByOne) {
  auto translator = random_translator();
  const auto lines = sample_lines(12);
  const auto one_by_one = translator.translate_text(lines, TranslationOptions{});
  const SentenceSplitter de("de");
  std::vector<Document> paragraphs;
  std::vector<std::string> texts, expected;
  for (size_t i = 0; i < lines.size();) {
    const size_t n = 2 + i % 3;  // 2-4 sentences, as the lines come
    std::string text, want;
    for (size_t k = 0; k < n && i < lines.size(); ++k, ++i) {
      const std::string space = k == 0 ? "" : k % 2 ? " " : "  ";
      text += space + lines[i];
      want += space + one_by_one[i];
    }
    paragraphs.emplace_back(text, DocumentFormat::kText, &de);
    texts.push_back(text);
    expected.push_back(want);
  }
  const auto out = translate_documents(translator, paragraphs, TranslationOptions{}, {}, true);
  ASSERT_EQ(out.size(), expected.size());
  for (size_t p = 0; p < out.size(); ++p) {
    EXPECT_EQ(out[p].text, expected[p]) << "paragraph " << p;
    // One alignment over the paragraph's words, each sentence's offset by those before it.
    const auto n_src = static_cast<int32_t>(whitespace_words(texts[p]).size());
    const auto n_tgt = static_cast<int32_t>(whitespace_words(out[p].text).size());
    EXPECT_EQ(out[p].alignment.empty(), n_tgt == 0);
    for (const auto& [s, t] : out[p].alignment) EXPECT_TRUE(s < n_src && t < n_tgt) << s << "-" << t;
  }
}

TEST(DocumentTranslator, HtmlThroughAModelKeepsEveryTagNested) {
  auto translator = random_translator();
  const SentenceSplitter de("de");
  const std::string html =
      "<div><p>Guten <b>Morgen</b>! Wie <i>geht <u>es</u></i> <a href=\"/x\" title=\"T\">Ihnen</a>?</p>"
      "<p>Mir geht es <em>gut</em>, danke.<img src=\"i.png\"></p></div>";
  const Document d(html, DocumentFormat::kHtml, &de);
  const auto out = translate_documents(translator, {d}, TranslationOptions{}, {}, false);
  const std::string& text = out[0].text;
  for (const std::string tag : {"<div>", "<p>", "<b>", "</b>", "<i>", "<u>", "</u>", "</i>",
                                "<a href=\"/x\" title=\"T\">", "</a>", "</p>", "<em>", "</em>", "<img src=\"i.png\">",
                                "</div>"}) {
    const size_t first = text.find(tag);
    EXPECT_NE(first, std::string::npos) << tag << " in " << text;
  }
  // Nesting: <u> inside <i>, each pair in order.
  EXPECT_LT(text.find("<i>"), text.find("<u>"));
  EXPECT_LT(text.find("</u>"), text.find("</i>"));
  EXPECT_LT(text.find("<b>"), text.find("</b>"));
}

}  // namespace
}  // namespace torchmt
