#pragma once
// Rule-based sentence splitting for German and English, by the rules of Moses'
// split-sentences.perl: a sentence ends at '.', '?' or '!' (closing quotes and brackets may
// follow) before whitespace and a word that can start a sentence (an upper-case letter or a
// digit, after opening quotes or brackets), unless the word before the full stop is a known
// abbreviation of the language, an initial, an abbreviation with inner full stops (z.B., U.S.),
// a numeric-only prefix before a number (Nr. 5, No. 5), or, in German, an ordinal (am 3. Mai).
// Light header: no LibTorch.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace torchmt {

struct TextSpan {
  size_t begin = 0, end = 0;  // byte offsets [begin, end)
};

// The words of `text`: maximal runs of anything but ASCII whitespace (space, \t, \n, \r, \f, \v).
std::vector<TextSpan> whitespace_words(std::string_view text);

class SentenceSplitter {
 public:
  // "de" or "en"; std::invalid_argument naming the value otherwise.
  explicit SentenceSplitter(const std::string& language);
  static bool supports(const std::string& language) { return language == "de" || language == "en"; }
  const std::string& language() const { return language_; }

  // The sentences of `text` in order: byte ranges without the whitespace around them (what lies
  // between two of them is the original spacing). Blank text has none. Any whitespace (tabs and
  // newlines included) separates words; nothing else is changed.
  std::vector<TextSpan> split(std::string_view text) const;

 private:
  std::string language_;
};

}  // namespace torchmt
