// Sentence splitting, word alignments and documents (lines of several sentences, HTML): the text
// side, with hand-made translations and alignments (tests/alignment_test.cpp runs them through a model).
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "data/document.h"
#include "torchmt/data/sentence_splitter.h"
#include "torchmt/data/word_alignment.h"

namespace torchmt {
namespace {

std::vector<std::string> sentences_of(const std::string& text, const std::string& language) {
  std::vector<std::string> out;
  for (const auto& s : SentenceSplitter(language).split(text)) out.push_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

TEST(SentenceSplitter, GermanRules) {
  EXPECT_EQ(sentences_of("Das ist z.B. ein Test. Er kam am 3. Mai an. Wirklich? Ja!  Gut.", "de"),
            (std::vector<std::string>{"Das ist z.B. ein Test.", "Er kam am 3. Mai an.", "Wirklich?", "Ja!", "Gut."}));
  EXPECT_EQ(sentences_of("Herr Dr. Meier wohnt in der Str. 5 in Berlin. „Hallo.“ Dann ging er.", "de"),
            (std::vector<std::string>{"Herr Dr. Meier wohnt in der Str. 5 in Berlin.", "„Hallo.“", "Dann ging er."}));
  EXPECT_EQ(sentences_of("Es sind ca. drei Meter. und weiter", "de"),
            (std::vector<std::string>{"Es sind ca. drei Meter. und weiter"}));  // no capital: no end
  EXPECT_EQ(sentences_of("Siehe Nr. 5 unten. Zwei Hunde rennen... Ein Mann (links.) Eine Frau.", "de"),
            (std::vector<std::string>{"Siehe Nr. 5 unten.", "Zwei Hunde rennen...", "Ein Mann (links.)", "Eine Frau."}));
  EXPECT_TRUE(SentenceSplitter("de").split(" \t\n").empty());
  EXPECT_EQ(sentences_of("ohne Punkt am Ende", "de"), (std::vector<std::string>{"ohne Punkt am Ende"}));
}

TEST(SentenceSplitter, EnglishRulesAndBadLanguage) {
  EXPECT_EQ(sentences_of("Mr. Smith lives at No. 5 Elm St. He was born in 1990. Then he left. J. R. R. Tolkien wrote.",
                         "en"),
            (std::vector<std::string>{"Mr. Smith lives at No. 5 Elm St. He was born in 1990.", "Then he left.",
                                      "J. R. R. Tolkien wrote."}));
  EXPECT_EQ(sentences_of("She said \"Stop.\" Then she ran. It cost 5 U.S. dollars.", "en"),
            (std::vector<std::string>{"She said \"Stop.\"", "Then she ran.", "It cost 5 U.S. dollars."}));
  EXPECT_EQ(sentences_of("Ich bin 1990. Dann", "de").size(), 1u);  // German: an ordinal
  EXPECT_EQ(sentences_of("I was born in 1990. Then", "en").size(), 2u);
  EXPECT_THROW(SentenceSplitter("fr"), std::invalid_argument);
}

TEST(WordAlignment, PharaohAerAndPieceWords) {
  const auto gold = parse_gold_alignment("0-0 1?2 2-1 2-1");
  EXPECT_EQ(gold.sure, (WordAlignment{{0, 0}, {2, 1}}));
  EXPECT_EQ(gold.possible, (WordAlignment{{0, 0}, {1, 2}, {2, 1}}));
  EXPECT_EQ(to_pharaoh(gold.possible), "0-0 1-2 2-1");
  AlignmentScore score;
  score.add({{0, 0}, {1, 2}, {1, 1}}, gold);  // one sure, one possible, one wrong
  EXPECT_NEAR(score.error_rate(), 1.0 - (1.0 + 2.0) / (3.0 + 2.0), 1e-12);
  EXPECT_NEAR(score.precision(), 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(score.recall(), 0.5, 1e-12);
  AlignmentScore perfect;
  perfect.add(gold.sure, gold);
  EXPECT_EQ(perfect.error_rate(), 0.0);
  EXPECT_THROW(parse_gold_alignment("0-0 1x2"), std::invalid_argument);
  EXPECT_THROW(parse_gold_alignment("0--1"), std::invalid_argument);
  EXPECT_EQ(piece_words({"\xE2\x96\x81" "Ein", "\xE2\x96\x81Hund", "e", "\xE2\x96\x81", "\"", "."}),
            (std::vector<int32_t>{0, 1, 1, 2, 2, 2}));
  EXPECT_EQ(piece_words({"ab", "\xE2\x96\x81" "c"}), (std::vector<int32_t>{0, 1}));
}

// Each sentence "translated" by a function of its words, with the alignment it implies.
std::vector<SentenceTranslation> translate_words(const Document& d, bool reverse, bool upper = true) {
  std::vector<SentenceTranslation> out;
  for (const auto& s : d.sentences()) {
    const auto words = whitespace_words(s);
    SentenceTranslation t;
    const auto n = static_cast<int32_t>(words.size());
    for (int32_t k = 0; k < n; ++k) {
      const auto src = reverse ? n - 1 - k : k;
      std::string w = s.substr(words[static_cast<size_t>(src)].begin,
                               words[static_cast<size_t>(src)].end - words[static_cast<size_t>(src)].begin);
      if (upper)
        for (auto& c : w) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
      if (k) t.text += ' ';
      t.text += w;
      t.alignment.emplace_back(src, k);
    }
    std::sort(t.alignment.begin(), t.alignment.end());
    out.push_back(std::move(t));
  }
  return out;
}

// The tags of an HTML text in order (comments, doctypes included), and whether its inline
// elements nest.
std::vector<std::string> tags_of(const std::string& html) {
  std::vector<std::string> tags;
  for (size_t i = 0; (i = html.find('<', i)) != std::string::npos;) {
    const size_t end = html.compare(i, 4, "<!--") == 0 ? html.find("-->", i) + 3 : html.find('>', i) + 1;
    tags.push_back(html.substr(i, end - i));
    i = end;
  }
  return tags;
}
bool nests(const std::string& html) {
  std::vector<std::string> stack;
  for (const auto& tag : tags_of(html)) {
    if (tag[1] == '!' || tag[tag.size() - 2] == '/') continue;
    size_t end = tag.find_first_of(" >", 1);
    std::string name = tag.substr(tag[1] == '/' ? 2 : 1, end - (tag[1] == '/' ? 2 : 1));
    if (name == "img" || name == "br" || name == "hr" || name == "meta") continue;
    if (tag[1] != '/') {
      stack.push_back(name);
    } else {
      if (stack.empty() || stack.back() != name) return false;
      stack.pop_back();
    }
  }
  return stack.empty();
}
std::map<std::string, int> tag_counts(const std::string& html) {
  std::map<std::string, int> counts;
  for (const auto& t : tags_of(html)) ++counts[t];
  return counts;
}

TEST(Document, TextLinesSplitIntoSentencesKeepTheirSpacing) {
  const SentenceSplitter de("de");
  const Document d("  Ein Satz. Noch einer!\tDritter Satz\n\nZweite Zeile. Ende.\n", DocumentFormat::kText, &de);
  EXPECT_EQ(d.sentences(), (std::vector<std::string>{"Ein Satz.", "Noch einer!", "Dritter Satz", "Zweite Zeile.", "Ende."}));
  EXPECT_FALSE(d.needs_alignments());
  EXPECT_EQ(d.assemble(translate_words(d, false)), "  EIN SATZ. NOCH EINER!\tDRITTER SATZ\n\nZWEITE ZEILE. ENDE.\n");
  const Document whole("Ein Satz. Noch einer.", DocumentFormat::kText, nullptr);
  EXPECT_EQ(whole.sentences(), (std::vector<std::string>{"Ein Satz. Noch einer."}));
  EXPECT_THROW(d.assemble({}), std::invalid_argument);
  EXPECT_THROW(parse_document_format("xml"), std::invalid_argument);
}

TEST(Document, HtmlKeepsMarkupEntitiesAndUntranslatedElements) {
  const SentenceSplitter de("de");
  const std::string html =
      "<!DOCTYPE html>\n<html><head><title>Ein Titel</title><style>p { color: red; }</style></head>\n"
      "<body><p class=\"x\" title=\"nicht übersetzen\">Ein <b>kleiner</b> Hund. Zwei <i>Katzen</i> &amp; "
      "<a href=\"/s?a=1&amp;b=2\">eine Maus</a>.</p>\n<!-- ein Kommentar -->"
      "<ul><li>Erster &#x27;Punkt&#x27;</li><li translate=\"no\">Nicht <b>das</b></li></ul>"
      "<p>Code: <code>x &lt; y</code> hier<br>neue Zeile <img src=\"a.png\" alt=\"Bild\">mit Bild</p>"
      "<script>var s = \"<b>Ein Satz.</b>\";</script></body></html>\n";
  const Document d(html, DocumentFormat::kHtml, &de);
  EXPECT_EQ(d.sentences(),
            (std::vector<std::string>{"Ein Titel", "Ein kleiner Hund.", "Zwei Katzen & eine Maus.", "Erster 'Punkt'",
                                      "Code:", "hier", "neue Zeile mit Bild"}));
  EXPECT_TRUE(d.needs_alignments());
  // Words in place: the document comes back as it was, markup, entities and spacing included.
  EXPECT_EQ(d.assemble(translate_words(d, false, false)), html);
  const std::string upper = d.assemble(translate_words(d, false));
  EXPECT_NE(upper.find("<p class=\"x\" title=\"nicht übersetzen\">EIN <b>KLEINER</b> HUND. ZWEI <i>KATZEN</i> &amp; "
                       "<a href=\"/s?a=1&amp;b=2\">EINE MAUS</a>.</p>"),
            std::string::npos)
      << upper;
  EXPECT_NE(upper.find("ERSTER &#x27;PUNKT&#x27;"), std::string::npos) << upper;
  EXPECT_NE(upper.find("<li translate=\"no\">Nicht <b>das</b></li>"), std::string::npos);
  EXPECT_NE(upper.find("<code>x &lt; y</code> HIER<br>NEUE ZEILE <img src=\"a.png\" alt=\"Bild\">MIT BILD"),
            std::string::npos)
      << upper;
  EXPECT_NE(upper.find("<script>var s = \"<b>Ein Satz.</b>\";</script>"), std::string::npos);
  EXPECT_EQ(tag_counts(upper), tag_counts(html));
}

TEST(Document, InlineTagsFollowTheAlignedWords) {
  const SentenceSplitter de("de");
  const std::string html = "<p>Der <b>große <i>braune</i></b> Hund <a href=\"#\">schläft</a> hier.</p>";
  const Document d(html, DocumentFormat::kHtml, &de);
  const std::string reversed = d.assemble(translate_words(d, true));
  // HIER. SCHLÄFT HUND BRAUNE GROSSE DER: each tag around the words of its source words, nested.
  EXPECT_EQ(reversed, "<p>HIER. <a href=\"#\">SCHLäFT</a> HUND <b><i>BRAUNE</i> GROßE</b> DER</p>");
  // Crossing projections: the second sibling keeps what the first left free; a tag whose words
  // vanished stays as an empty element; a word left unaligned keeps its place.
  const Document two("<p><b>eins zwei</b> <i>drei</i> vier</p>", DocumentFormat::kHtml, &de);
  std::vector<SentenceTranslation> t{{"ONE TWO THREE FOUR", {{0, 0}, {1, 2}, {2, 1}, {2, 2}}}};
  const std::string crossed = two.assemble(t);
  EXPECT_TRUE(nests(crossed)) << crossed;
  EXPECT_EQ(tag_counts(crossed), tag_counts(two.assemble(translate_words(two, false))));
  std::vector<SentenceTranslation> lost{{"ONE TWO THREE FOUR", {{0, 0}, {1, 1}, {3, 3}}}};
  EXPECT_EQ(two.assemble(lost), "<p><b>ONE TWO</b> THREE <i></i>FOUR</p>");
}

TEST(Document, HostileHtmlIsBoundedAndKeepsEveryTag) {
  const SentenceSplitter de("de");
  std::string nested;
  for (int i = 0; i < 10000; ++i) nested += "<b>";
  nested += "Ein tief verschachtelter Satz.";
  for (int i = 0; i < 10000; ++i) nested += "</b>";
  std::string divs;
  for (int i = 0; i < 10000; ++i) divs += "<div>";
  divs += "Text";
  const std::string huge_attribute = "<p>Ein <a title=\"" + std::string(1 << 20, 'x') + "\">Link</a> hier.</p>";
  const std::vector<std::string> inputs{nested,
                                        divs,
                                        huge_attribute,
                                        "<p>Unclosed <b>bold <i>italic</p> after </i> stray </u> end",
                                        "<p>a < b and c > d & e &unknown; &#0; &#x110000; &#99999999999;</p>",
                                        "<p>Ein <!-- never closed",
                                        "<p title=\"never closed>Ein Satz.",
                                        "<b><i>verkreuzt</b></i> Text",
                                        "<script>never closed",
                                        "<p>Ein <a href=x\xff\xfe>kaputtes</a> Attribut.</p>",
                                        ""};
  for (const auto& html : inputs) {
    const auto start = std::chrono::steady_clock::now();
    const Document d(html, DocumentFormat::kHtml, &de);
    const std::string out = d.assemble(translate_words(d, true));
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
    if (html == nested || html == huge_attribute) {
      EXPECT_TRUE(nests(out));
      EXPECT_EQ(tag_counts(out), tag_counts(html));
    }
  }
  EXPECT_EQ(Document("", DocumentFormat::kHtml, &de).sentences().size(), 0u);
}

TEST(Document, ConcatenatedAlignmentsOffsetEachSentence) {
  const std::vector<std::string> sources{"a b.", "c d e."};
  const std::vector<SentenceTranslation> t{{"A B.", {{0, 0}, {1, 1}}}, {"E D C.", {{0, 2}, {2, 0}}}};
  EXPECT_EQ(concatenate_alignments(sources, t), (WordAlignment{{0, 0}, {1, 1}, {2, 4}, {4, 2}}));
}

}  // namespace
}  // namespace torchmt
