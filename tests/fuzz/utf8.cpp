// Fuzz target: the one UTF-8 validator and codec (util/utf8.h) against its own promises.
#include "fuzz_support.h"
#include "util/utf8.h"

using namespace torchmt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  const auto first_bad = find_invalid_utf8(text);
  const auto decoded = decode_utf8(text);
  FUZZ_CHECK(first_bad.has_value() == !decoded.has_value());
  FUZZ_CHECK(is_valid_utf8(text) == decoded.has_value());

  size_t replaced = 0;
  const std::string repaired = replace_invalid_utf8(text, &replaced);
  FUZZ_CHECK(is_valid_utf8(repaired));
  FUZZ_CHECK((replaced == 0) == decoded.has_value());
  FUZZ_CHECK(replace_invalid_utf8(repaired) == repaired);  // nothing left to replace
  if (decoded) {
    FUZZ_CHECK(repaired == text);
    FUZZ_CHECK(encode_utf8(*decoded) == text);  // a lossless round trip
    for (char32_t c : *decoded) FUZZ_CHECK(c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF));
  } else {
    FUZZ_CHECK(*first_bad < size);
    FUZZ_CHECK(is_valid_utf8(text.substr(0, *first_bad)));  // everything before it is valid
    // Each replacement is one U+FFFD (3 bytes) for at least one byte of input.
    FUZZ_CHECK(replaced <= size - *first_bad);
    FUZZ_CHECK(repaired.compare(0, *first_bad, text.substr(0, *first_bad)) == 0);
    try {
      decode_utf8_or_throw(text, "input");
      FUZZ_CHECK(false);
    } catch (const std::invalid_argument& e) {
      fuzz::check_error_message(e);
    }
  }
  return 0;
}
