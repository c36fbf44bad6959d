// Fuzz target: what `torchmt serve` makes of a request body (serving/http_api.h), for both
// endpoints and every content type. The first byte picks the endpoint and the content type, the
// rest is the body. Either a request within the server's caps comes out, or an ApiError with a
// 4xx status and a one-line message; never another exception or a crash.
#include "fuzz_support.h"
#include "serving/http_api.h"
#include "util/utf8.h"

using namespace torchmt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kTypes[] = {"application/json", "application/x-www-form-urlencoded", "",
                                       "text/plain; charset=utf-8", "multipart/form-data"};
  const bool v1 = data[0] & 1;
  const std::string type = kTypes[(data[0] >> 1) % 5];
  const std::string body(fuzz::as_text(data + 1, size - 1));
  ApiSettings settings;
  settings.limits.max_sentences = 8;
  settings.limits.max_sentence_chars = 40;
  settings.limits.max_beam = 6;
  settings.pairs = {{"de", "en"}};
  try {
    const ApiRequest r = v1 ? parse_v1_request(type, body, settings) : parse_libretranslate_request(type, body, settings);
    size_t lines = 0;
    for (size_t n : r.lines_per_text) {
      FUZZ_CHECK(n >= 1 || !r.documents.empty());  // a text has a line, maybe empty (a document: maybe none)
      lines += n;
    }
    FUZZ_CHECK(lines == r.sentences.size());
    FUZZ_CHECK(r.list || r.lines_per_text.size() == 1);
    FUZZ_CHECK(r.documents.empty() || r.documents.size() == r.lines_per_text.size());
    FUZZ_CHECK(r.sentences.size() <= static_cast<size_t>(settings.limits.max_sentences));
    for (const auto& s : r.sentences) {
      FUZZ_CHECK(is_valid_utf8(s));
      FUZZ_CHECK(s.find('\n') == std::string::npos);
      FUZZ_CHECK(decode_utf8(s)->size() <= static_cast<size_t>(settings.limits.max_sentence_chars));
    }
    const auto& search = r.options.search;
    FUZZ_CHECK(search.beam_size >= 1 && search.beam_size <= settings.limits.max_beam);
    FUZZ_CHECK(search.nbest >= 1 && search.nbest <= search.beam_size);
    FUZZ_CHECK(search.length_penalty >= 0 && search.max_len_a >= 0 && search.max_len_b >= 0);
    if (!v1) FUZZ_CHECK(!r.options.attention && !r.options.scores);
  } catch (const ApiError& e) {
    FUZZ_CHECK(e.status() == 400 || e.status() == 413 || e.status() == 415);
    fuzz::check_error_message(e);
    const std::string json = error_json(e.what());
    FUZZ_CHECK(is_valid_utf8(json));
    FUZZ_CHECK(json.rfind("{\"error\":\"", 0) == 0 && json.back() == '}');
  }
  // Two directions (routing, "auto" without an identifier), LibreTranslate's limits, /detect and
  // the API key field: the same promise.
  settings.pairs = {{"de", "en"}, {"en", "de"}};
  settings.char_limit = 30;
  settings.batch_limit = 3;
  try {
    (void)request_api_key(type, body);  // never throws
    if (v1) {
      const DetectRequest d = parse_detect_request(type, body);
      FUZZ_CHECK(!d.texts.empty() && (d.list || d.texts.size() == 1));
    } else {
      const LibreTranslateRequest r = read_libretranslate_request(type, body, settings);
      FUZZ_CHECK(!r.texts.empty() && r.texts.size() <= 3);
      const std::string source = r.source == "auto" ? "de" : r.source;
      (void)libretranslate_route(settings, source, r.target);
      std::vector<size_t> all(r.texts.size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = i;
      const ApiRequest job = libretranslate_job(r, all, source, settings);
      FUZZ_CHECK(job.lines_per_text.size() == r.texts.size());
    }
  } catch (const ApiError& e) {
    FUZZ_CHECK(e.status() == 400 || e.status() == 413 || e.status() == 415);
    fuzz::check_error_message(e);
  }
  return 0;
}
