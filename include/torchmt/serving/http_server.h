#pragma once
// `torchmt serve`'s HTTP front (cpp-httplib): the endpoints, caps and timeouts around a
// TranslationService.
//
//   GET  /              the web page (no external script, style or font)
//   POST /translate     LibreTranslate's API (torchmt/serving/http_api.h)
//   POST /v1/translate  torchmt's API: search options, n-best with scores, attention
//   GET  /languages     LibreTranslate's list (when the server was told its languages)
//   GET  /health        {"status": "ok", ...}
//   GET  /metrics       Prometheus text (torchmt/serving/metrics.h)
// Every error is {"error": "..."} with its status: 400 malformed, 404 unknown path, 413 too
// large, 415 content type, 503 queue full / shutting down / request timeout.
//
// Built only with cpp-httplib (Debian: libcpp-httplib-dev); see available().
#include <cstdint>
#include <memory>
#include <string>

#include "torchmt/decoding/confidence.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/serving/http_api.h"

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
  std::string model_name;               // shown by /health
  std::shared_ptr<const ConfidenceModel> confidence_model;  // requests' confidence: this calibration (null: raw)
};

class HttpServer {
 public:
  // All three must outlive the server.
  HttpServer(Translator& translator, TranslationService& service, ServiceMetrics& metrics, ServerOptions options);
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
