#pragma once
// `torchmt serve`'s HTTP front (cpp-httplib): the endpoints, caps and timeouts around a
// TranslationService.
//
//   GET  /              the web page (no external script, style or font)
//   POST /translate     LibreTranslate's API (torchmt/serving/http_api.h), routed by source
//                       and target among the models ("auto": each text's detected language)
//   POST /detect        LibreTranslate's: [{"language", "confidence"}] by the models' identifier
//   GET  /languages     LibreTranslate's [{code, name, targets}]
//   POST /translate_file  a .txt or .html file (multipart form), its layout kept; the answer's
//                       translatedFileUrl is GET /download_file/<id>/<name> (kept 30 minutes)
//   GET  /frontend/settings, GET /spec (OpenAPI), POST /suggest (off): as LibreTranslate answers them
//   GET  /health        {"status": "ok"}
//   POST /v1/translate  torchmt's API: search options, n-best with scores, attention
//   GET  /v1/health     the models, their languages, device and precision
//   GET  /metrics       Prometheus text (torchmt/serving/metrics.h)
// Every error is {"error": "..."} with its status: 400 malformed, 403 API key, 404 unknown path,
// 405 wrong method, 413 too large, 415 content type, 429 over the request limit (Retry-After),
// 503 queue full / shutting down / request timeout.
//
// Built only with cpp-httplib (Debian: libcpp-httplib-dev); see available().
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "torchmt/decoding/confidence.h"
#include "torchmt/decoding/translation_options.h"
#include "serving/access_control.h"
#include "serving/http_api.h"

namespace torchmt {

class Translator;
class TranslationService;
class ServiceMetrics;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0 = any free port (bind() says which)
  int64_t max_body_bytes = 1 << 20;     // larger bodies get 413
  double request_timeout_s = 60;        // a translation not done by then gets 503
  double read_timeout_s = 10;           // a client that sends its request slower than this is dropped
  int64_t connections = 128;            // connections served at once (a thread each); more wait
  TranslationOptions translation;       // batching and workers; translation.search = the defaults
  ApiSettings api;                      // caps and languages (api.search is set from translation.search)
  std::shared_ptr<const ConfidenceModel> confidence_model;  // requests' confidence: this calibration (null: raw)
  std::shared_ptr<const ApiKeys> api_keys;  // --api-keys: a key not among them is a 403 (null: no keys)
  bool require_api_key = false;             // a request without a key is a 403 too
  int64_t req_limit = -1;                   // requests per minute per client address (-1: none); keys have their own
  bool files_translation = true;            // POST /translate_file (.txt, .html)
  int64_t max_file_sentences = 2048;        // sentences of a translated file (413 beyond)
  // --reverse-model: the reverse direction of a served model that has none among the served
  // ones (null: none); api.reverse_weight > 0 needs one for every model.
  Translator* reverse_model = nullptr;
};

// One model the server routes requests to (its translator and its batching queue).
struct ServedModel {
  Translator* translator = nullptr;
  TranslationService* service = nullptr;
  std::string name;        // shown by /v1/health
  LanguagePair languages;  // empty codes: the model recorded none (then it must be the only one)
  // The model that scores the other way for reverse_weight (set by the server: the model itself
  // when trained on both directions, else the served model of the reverse pair, else
  // --reverse-model; null: none).
  Translator* reverse = nullptr;
};

class HttpServer {
 public:
  // The models, their translators and services and the metrics must outlive the server.
  // std::invalid_argument for two models of one direction, a model without languages beside
  // others, or a --reverse-weight with a model that has no reverse.
  HttpServer(std::vector<ServedModel> models, ServiceMetrics& metrics, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Whether this build has an HTTP server (cpp-httplib was found when it was built).
  static bool available();

  // Binds host:port; returns the port (the one chosen when port is 0). std::runtime_error
  // naming the address when it cannot.
  int bind();
  // Serves until stop(); returns once the requests in flight have been answered.
  void run();
  // Stops accepting connections; run() returns when those in flight are done. Any thread.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The page GET / serves: HTML with its script and style inline.
const std::string& web_page_html();

}  // namespace torchmt
