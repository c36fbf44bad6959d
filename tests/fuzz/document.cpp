// Fuzz target: documents (data/document.h) from any bytes: lines split into sentences or an HTML
// document, put back together from word-for-word and reversed "translations". Never an
// exception or a crash; sentences are never blank and hold no line break; a text document comes
// back as it was from its own sentences.
#include "fuzz_support.h"
#include "data/document.h"
#include "util/utf8.h"

using namespace torchmt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool html = data[0] & 1, split = data[0] & 2, reverse = data[0] & 4;
  const std::string text(fuzz::as_text(data + 1, size - 1));
  static const SentenceSplitter splitter("de");
  const Document d(text, html ? DocumentFormat::kHtml : DocumentFormat::kText, split ? &splitter : nullptr);
  std::vector<SentenceTranslation> same, turned;
  for (const auto& s : d.sentences()) {
    FUZZ_CHECK(!whitespace_words(s).empty());
    FUZZ_CHECK(s.find('\n') == std::string::npos);
    if (is_valid_utf8(text)) FUZZ_CHECK(is_valid_utf8(s));
    const auto n = static_cast<int32_t>(whitespace_words(s).size());
    SentenceTranslation t{s, {}}, r{s, {}};
    for (int32_t k = 0; k < n; ++k) {
      t.alignment.emplace_back(k, k);
      r.alignment.emplace_back(k, reverse ? n - 1 - k : (k * 7) % n);
    }
    std::sort(r.alignment.begin(), r.alignment.end());
    same.push_back(std::move(t));
    turned.push_back(std::move(r));
  }
  const std::string back = d.assemble(same);
  if (!html) FUZZ_CHECK(back == text);
  (void)d.assemble(turned);
  return 0;
}
