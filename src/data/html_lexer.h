#pragma once
// The HTML lexer under Document (data/document.h): lenient, without recursion, every byte of the
// input in exactly one token. What a tag means for translation (inline, void, raw text, left
// alone) is classify()'s; what to do with it is the Document's.
#include <cstdint>
#include <string>
#include <string_view>

namespace torchmt::html {

// A tag as written: its lower-case name, whether it is an end tag or closes itself, the
// attributes that decide whether its content is translated (translate="no", class
// "notranslate").
struct Tag {
  std::string name;
  bool end = false, self_closing = false, untranslated = false;
};

// What an element is to a translator.
enum class ElementKind {
  kInline,        // stays inside a sentence (b, i, a, span, ...)
  kVoidInline,    // an inline element without content (img, wbr)
  kRawText,       // content up to the end tag is not markup (script, style, textarea)
  kUntranslated,  // content kept as written (code, pre, kbd, samp, svg, math)
  kBlock,         // every other tag ends a block of text
};
ElementKind classify(const std::string& name);
bool is_void(const std::string& name);  // no end tag (br, img, input, ...)

struct Token {
  enum class Kind {
    kText,         // bytes up to the next '<' or '&' that may start something else
    kComment,      // <!-- ... -->
    kDeclaration,  // <!doctype ...>, <?...?>
    kTag,          // a start or end tag; `tag` says which
    kEntity,       // a character reference; `code_point` (U+FFFD for one that names no character)
  };
  Kind kind = Kind::kText;
  size_t begin = 0, end = 0;  // its bytes in the text
  Tag tag;
  char32_t code_point = 0;
};

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  // The next token; false at the end of the text.
  bool next(Token& token);
  // Skips the content of the element whose start tag `start` was the last token: after its
  // matching end tag (a raw-text element: the first "</name"), or to the end of the text.
  // Returns where the lexer goes on.
  size_t skip_element(const Tag& start);

 private:
  std::string_view text_;
  size_t pos_ = 0;
  std::string lowered_;  // the text in lower case, made when first needed
};

}  // namespace torchmt::html
