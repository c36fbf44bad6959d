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
#include <stdexcept>
#include <string>
#include <vector>

#include "torchmt/data/document.h"
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

// What the server accepts and answers (its configuration, not a request's).
struct ApiSettings {
  ApiLimits limits;
  SearchOptions search;            // the server's defaults; /v1 requests may override them
  std::string source_language;     // "" = any; else a LibreTranslate `source` other than it
  std::string target_language;     //   (or "auto") is a 400
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
  std::string format = "text";  // or "html"
  bool split_sentences = false; // split each line into sentences (always for html)
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

// Throw ApiError. `content_type` as sent (parameters such as charset ignored).
ApiRequest parse_libretranslate_request(const std::string& content_type, const std::string& body,
                                        const ApiSettings& settings);
ApiRequest parse_v1_request(const std::string& content_type, const std::string& body, const ApiSettings& settings);

// {"error": message} (the message as valid JSON whatever its bytes).
std::string error_json(const std::string& message);

// application/x-www-form-urlencoded: key -> values in order ('+' is a space, %XX a byte).
// ApiError 400 on a bad escape.
std::vector<std::pair<std::string, std::string>> parse_form(const std::string& body);

}  // namespace torchmt
