#pragma once
// sacreBLEU's default "13a" tokenizer (the tokenization of mteval-v13a.pl used by WMT), ported
// rule for rule from sacrebleu/tokenizers/tokenizer_13a.py and tokenizer_re.py (2.6.0).
#include <string>
#include <string_view>

namespace torchmt::evaluation {

// The tokenized line, tokens separated by single spaces, exactly as sacreBLEU's
// `Tokenizer13a()(line)`. Works on code points; `line` must be valid UTF-8 (throws
// std::invalid_argument otherwise).
std::string tokenize_13a(std::string_view line);

// The same on decoded text, for callers that already hold code points.
std::u32string tokenize_13a(std::u32string_view line);

}  // namespace torchmt::evaluation
