#pragma once
// What the server's endpoints read and write, apart from the HTTP library: request bodies in,
// a validated request or an ApiError (HTTP status + one-line message) out. Pure functions of
// the bytes, so the fuzz target (tests/fuzz/http_api.cpp) runs them on anything.
//
//   POST /translate      LibreTranslate's API: JSON or form-encoded; q (string or list of
//                        strings), source, target, format ("text" or "html"), api_key and
//                        alternatives accepted; other keys ignored (clients send more than they
//                        need). Each line is split into sentences (data/document.h).
//   POST /v1/translate   torchmt's: a JSON object with q and the options of the request table
//                        below (the `translate` flags' names); unknown keys are an error.
//                        target_prefix: shaped as q (a string or a list of strings), line for
//                        line: each translation starts with its prefix.
// Light header: no LibTorch.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/document.h"
#include "torchmt/data/language_identifier.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/util/option_table.h"

namespace torchmt {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// Caps on what one request may ask for (413 for too many sentences or characters, 400 for
// options out of range).
struct ApiLimits {
  int64_t max_sentences = 64;        // sentences per request
  int64_t max_sentence_chars = 2000; // characters (code points) per sentence
  int64_t max_beam = 16;             // beam (and n-best) a request may ask for
};

struct LanguagePair {
  std::string source, target;
  bool operator==(const LanguagePair& o) const { return source == o.source && target == o.target; }
};

// What the server accepts and answers (its configuration, not a request's).
struct ApiSettings {
  ApiLimits limits;
  SearchOptions search;  // the server's defaults; /v1 requests may override them
  double reverse_weight = 0;  // --reverse-weight: requests with a beam are reranked (the default of /v1's)
  // The directions served, one per model: route i is model i. Empty: one model that recorded
  // no languages, which takes any source and target.
  std::vector<LanguagePair> pairs;
  // The served languages' identifier (source "auto", /detect); null: none.
  std::shared_ptr<const LanguageIdentifier> identifier;
  int64_t char_limit = -1;   // LibreTranslate's --char-limit: characters per text (-1: none)
  int64_t batch_limit = -1;  // LibreTranslate's --batch-limit: texts per list request (-1: none)
};

// The per-request options of /v1/translate (one table: names, types, help and defaults).
struct RequestOptions {
  SearchOptions search;
  bool scores = false;          // n-best hypotheses with their scores
  bool attention = false;       // the cross-attention of each sentence (weights, pieces, SVG)
  int64_t attention_layer = -1; // -1 = last
  int64_t attention_head = -1;  // -1 = mean over heads
  bool alignments = false;      // each sentence's word alignment (Pharaoh pairs)
  bool confidence = false;      // each sentence's and word's confidence (decoding/confidence.h)
  std::string source, target;   // the direction, where the server serves several
  std::string api_key;          // the client's key (the server checks it)
  std::string format = "text";  // or "html"
  bool split_sentences = false; // split each line into sentences (always for html)
  double reverse_weight = 0;    // rerank the beam with the reverse direction (0 = off)
};
const OptionTable<RequestOptions>& request_option_table();

struct ApiRequest {
  // Every line of every text of q, in order; with documents, every sentence of every document.
  std::vector<std::string> sentences;
  // One per text of q when its lines are split into sentences or it is HTML, else none.
  std::vector<Document> documents;
  std::vector<std::string> target_prefixes;  // /v1's target_prefix: one per sentence, or none
  std::vector<std::vector<std::string>> constraints;  // /v1's constraints: phrases per sentence, or none
  std::vector<size_t> lines_per_text;  // how many of them each text of q has (joined back with '\n', or its document)
  bool list = false;                   // q was a list: the answer is a list too
  RequestOptions options;
};

// LibreTranslate's /translate as sent, checked as LibreTranslate checks it (its messages), before
// its texts are routed to the models.
struct LibreTranslateRequest {
  std::vector<std::string> texts;
  bool list = false;           // q was a list
  std::string source, target;  // source may be "auto"; filled in where the served pairs leave one choice
  RequestOptions options;      // format, alternatives (nbest), confidence
  std::string api_key;
};

struct DetectRequest {
  std::vector<std::string> texts;
  bool list = false;
  std::string api_key;
};

// All throw ApiError. `content_type` as sent (parameters such as charset ignored).
LibreTranslateRequest read_libretranslate_request(const std::string& content_type, const std::string& body,
                                                  const ApiSettings& settings);
// The language a text of an "auto" request is taken to be in: the most likely one that can be
// translated into `target` (or is it), else the most likely; without an identifier, the one
// source served into `target` (confidence 0).
LanguageGuess detect_source(const ApiSettings& settings, const std::string& text, const std::string& target);
// The model (index of settings.pairs; 0 without pairs) for texts in `source` to `target`.
size_t libretranslate_route(const ApiSettings& settings, const std::string& source, const std::string& target);
// The texts `texts` (indices) of a request, in `source`, as one model's job.
ApiRequest libretranslate_job(const LibreTranslateRequest& request, const std::vector<size_t>& texts,
                              const std::string& source, const ApiSettings& settings);
// The three above for one route: every text in the request's source (or, for "auto", the first
// text's language).
ApiRequest parse_libretranslate_request(const std::string& content_type, const std::string& body,
                                        const ApiSettings& settings);
ApiRequest parse_v1_request(const std::string& content_type, const std::string& body, const ApiSettings& settings);
// The model of a /v1 request: its source/target options among settings.pairs.
size_t v1_route(const ApiSettings& settings, const RequestOptions& options);
// A request's api_key field ("" when it has none or its body does not parse).
std::string request_api_key(const std::string& content_type, const std::string& body);
// /detect's q (a text or a list of texts) and api_key.
DetectRequest parse_detect_request(const std::string& content_type, const std::string& body);

// {"error": message} (the message as valid JSON whatever its bytes).
std::string error_json(const std::string& message);

// application/x-www-form-urlencoded: key -> values in order ('+' is a space, %XX a byte).
// ApiError 400 on a bad escape.
std::vector<std::pair<std::string, std::string>> parse_form(const std::string& body);

}  // namespace torchmt
