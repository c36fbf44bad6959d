#include "torchmt/serving/http_server.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "torchmt/decoding/document_translator.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/serving/metrics.h"
#include "torchmt/serving/translation_service.h"

#if TORCHMT_WITH_HTTPLIB
#include <sys/socket.h>

#include <httplib.h>
#endif

namespace torchmt {

#if TORCHMT_WITH_HTTPLIB

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Each text of q put back together from `per_line` (entry k for its sentence k): its document
// assembled (with the alignments for its markup: the result's, or words in order for an export),
// or its lines joined.
std::vector<std::string> join_lines(const ApiRequest& request, const std::vector<std::string>& per_line,
                                    const std::vector<WordAlignment>& alignments = {}) {
  std::vector<std::string> texts;
  size_t line = 0;
  if (!request.documents.empty()) {
    for (size_t d = 0; d < request.documents.size(); ++d) {
      std::vector<SentenceTranslation> sentences;
      for (size_t i = 0; i < request.lines_per_text[d]; ++i, ++line) {
        SentenceTranslation t{per_line[line], {}};
        if (request.documents[d].needs_alignments())
          t.alignment = line < alignments.size() ? alignments[line]
                                                 : monotone_alignment(request.sentences[line], per_line[line]);
        sentences.push_back(std::move(t));
      }
      texts.push_back(request.documents[d].assemble(sentences));
    }
    return texts;
  }
  for (size_t lines : request.lines_per_text) {
    std::string text;
    for (size_t i = 0; i < lines; ++i, ++line) {
      if (i) text += '\n';
      text += per_line[line];
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

json attention_json(const AttentionMap& map) {
  json weights = json::array();
  if (map.weights.defined()) {
    auto w = map.weights.contiguous();
    const float* data = w.data_ptr<float>();
    for (int64_t t = 0; t < w.size(0); ++t) {
      json row = json::array();
      for (int64_t s = 0; s < w.size(1); ++s) row.push_back(std::round(data[t * w.size(1) + s] * 1e4f) / 1e4f);
      weights.push_back(std::move(row));
    }
  }
  return json{{"source_pieces", map.source_pieces},
              {"target_pieces", map.target_pieces},
              {"weights", std::move(weights)},
              {"svg", map.weights.defined() ? render_attention_svg(map) : std::string()}};
}

}  // namespace

struct HttpServer::Impl {
  Translator& translator;
  TranslationService& service;
  ServiceMetrics& metrics;
  ServerOptions options;
  httplib::Server server;
  std::mutex mutex;
  std::condition_variable finished_cv;
  bool stop_requested = false, running = false, finished = false;
  socket_t listen_socket = -1;

  Impl(Translator& t, TranslationService& s, ServiceMetrics& m, ServerOptions o)
      : translator(t), service(s), metrics(m), options(std::move(o)) {
    options.api.search = options.translation.search;
    const size_t threads = static_cast<size_t>(std::max<int64_t>(1, options.connections));
    server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
    const auto read_timeout = std::chrono::duration<double>(options.read_timeout_s);
    server.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(read_timeout));
    server.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(read_timeout));
    server.set_keep_alive_timeout(5);
    server.set_tcp_nodelay(true);
    // httplib's default is SO_REUSEPORT, with which a second server on the same port starts
    // silently and takes half of the connections; SO_REUSEADDR only restarts over TIME_WAIT.
    server.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_socket = sock;
    });
    // A connection per request would queue behind httplib's listen backlog (5) under load;
    // clients keep theirs (the keep-alive timeout still closes idle ones).
    server.set_keep_alive_max_count(100000);
    routes();
  }

  static void reply_error(httplib::Response& res, int status, const std::string& message) {
    res.status = status;
    res.set_content(error_json(message), "application/json");
  }

  void routes() {
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      // Nothing from anywhere else: the page runs on a machine without a network.
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' blob: data:");
      res.set_content(web_page_html(), "text/html; charset=utf-8");
    });
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump(json{{"status", "ok"},
                                {"model", options.model_name},
                                {"device", translator.device().str()},
                                {"dtype", std::string(c10::toString(translator.dtype()))},
                                {"attention", static_cast<bool>(translator.model())},
                                {"source_language", options.api.source_language},
                                {"target_language", options.api.target_language}}),
                      "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.prometheus(), "text/plain; version=0.0.4");
    });
    server.Get("/languages", [this](const httplib::Request&, httplib::Response& res) {
      json list = json::array();
      if (!options.api.source_language.empty())
        list.push_back({{"code", options.api.source_language},
                        {"name", options.api.source_language},
                        {"targets", json::array({options.api.target_language})}});
      res.set_content(dump(list), "application/json");
    });
    server.Post("/translate", [this](const httplib::Request& req, httplib::Response& res) {
      translate(req, res, "/translate", [this](const ApiRequest& r, const ServiceResult& result) {
        return libretranslate_answer(r, result);
      }, &parse_libretranslate_request);
    });
    server.Post("/v1/translate", [this](const httplib::Request& req, httplib::Response& res) {
      translate(req, res, "/v1/translate", [this](const ApiRequest& r, const ServiceResult& result) {
        return v1_answer(r, result);
      }, &parse_v1_request);
    });
    // Errors httplib answers itself (unknown path, body too large, malformed request line)
    // get the same JSON body as ours.
    server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string message;
      switch (res.status) {
        case 404: message = "no such endpoint: " + req.method + " " + req.path; break;
        case 405: message = "method not allowed: " + req.method + " " + req.path; break;
        case 413: message = "request body too large"; break;
        default: message = "HTTP error " + std::to_string(res.status); break;
      }
      res.set_content(error_json(message), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
      std::string message = "internal error";
      try {
        if (error) std::rethrow_exception(error);
      } catch (const std::exception& e) {
        message += std::string(": ") + e.what();
      } catch (...) {
      }
      reply_error(res, 500, message);
    });
    server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      // The translate endpoints count themselves (with their latency).
      if (req.path == "/translate" || req.path == "/v1/translate") return;
      const bool known = req.path == "/" || req.path == "/health" || req.path == "/metrics" || req.path == "/languages";
      metrics.record_request(known ? req.path : "other", res.status, -1);
    });
  }

  template <typename Answer, typename Parse>
  void translate(const httplib::Request& req, httplib::Response& res, const std::string& endpoint, Answer answer,
                 Parse parse) {
    const auto start = Clock::now();
    metrics.add_in_flight(1);
    try {
      const ApiRequest request = parse(req.get_header_value("Content-Type"), req.body, options.api);
      if (request.options.attention && !translator.model())
        throw ApiError(400, "attention weights need one checkpoint (this server runs an export or an ensemble)");
      if (request.options.alignments && !translator.model())
        throw ApiError(400, "word alignments need one checkpoint (this server runs an export or an ensemble)");
      bool markup = false;
      for (const auto& d : request.documents) markup = markup || d.needs_alignments();
      ServiceJob job;
      job.sentences = request.sentences;
      job.target_prefixes = request.target_prefixes;
      job.constraints = request.constraints;
      job.options = options.translation;
      job.options.search = request.options.search;
      job.options.search.scores = request.options.scores || request.options.search.nbest > 1;  // as answered below
      job.attention = request.options.attention;
      job.attention_layer = request.options.attention_layer;
      job.attention_head = request.options.attention_head;
      job.alignments = request.options.alignments || (markup && translator.model());
      job.confidence = request.options.confidence;
      job.confidence_model = options.confidence_model;
      ServiceResult result;
      if (!job.sentences.empty()) {  // a blank document has nothing to translate
        auto future = service.submit(std::move(job));
        if (future.wait_for(std::chrono::duration<double>(options.request_timeout_s)) != std::future_status::ready)
          throw ApiError(503, "the translation took longer than the request timeout (" +
                                  real_text(options.request_timeout_s) + " s)");
        try {
          result = future.get();
        } catch (const std::invalid_argument& e) {
          throw ApiError(400, e.what());
        }
      }
      res.status = 200;
      res.set_content(dump(answer(request, result)), "application/json");
    } catch (const ApiError& e) {
      reply_error(res, e.status(), e.what());
    } catch (const ServiceBusy& e) {
      reply_error(res, 503, e.what());
    } catch (const std::exception& e) {
      reply_error(res, 500, std::string("internal error: ") + e.what());
    }
    metrics.add_in_flight(-1);
    metrics.record_request(endpoint, res.status, std::chrono::duration<double>(Clock::now() - start).count());
  }

  // {"sentence": c, "words": [{"word": w, "confidence": c}, ...]} of one sentence, or of a text's
  // sentences together (its confidence their pieces' geometric mean probability, as one sentence's).
  static json confidence_json(const std::vector<const SentenceConfidence*>& sentences) {
    json words = json::array();
    double pieces = 0, weighted = 0, confidence = 1.0;
    for (const auto* s : sentences) {
      for (const auto& w : s->words) words.push_back({{"word", w.score.word}, {"confidence", w.confidence}});
      pieces += static_cast<double>(s->pieces);
      weighted += static_cast<double>(s->pieces) * s->confidence;
    }
    if (pieces > 0) confidence = weighted / pieces;
    return json{{"sentence", confidence}, {"words", std::move(words)}};
  }

  json libretranslate_answer(const ApiRequest& request, const ServiceResult& result) {
    std::vector<std::string> best;
    for (const auto& t : result.translations) best.push_back(t.texts.front());
    const auto texts = join_lines(request, best, result.alignments);
    json out;
    out["translatedText"] = request.list ? json(texts) : json(texts.front());
    const int64_t alternatives = request.options.search.nbest - 1;
    if (alternatives > 0) {
      std::vector<std::vector<std::string>> alts(texts.size());
      for (int64_t k = 1; k <= alternatives; ++k) {
        std::vector<std::string> kth;
        for (const auto& t : result.translations)
          kth.push_back(static_cast<size_t>(k) < t.texts.size() ? t.texts[static_cast<size_t>(k)] : t.texts.front());
        auto joined = join_lines(request, kth);
        for (size_t i = 0; i < joined.size(); ++i) alts[i].push_back(joined[i]);
      }
      out["alternatives"] = request.list ? json(alts) : json(alts.front());
    }
    if (request.options.confidence) {
      json per_text = json::array();
      size_t line = 0;
      for (size_t lines : request.lines_per_text) {
        std::vector<const SentenceConfidence*> sentences;
        for (size_t i = 0; i < lines; ++i, ++line) sentences.push_back(&result.confidence[line]);
        per_text.push_back(confidence_json(sentences));
      }
      out["confidence"] = request.list ? per_text : per_text.front();
    }
    return out;
  }

  json v1_answer(const ApiRequest& request, const ServiceResult& result) {
    json translations = json::array();
    std::vector<std::string> best;
    for (const auto& t : result.translations) best.push_back(t.texts.front());
    const auto texts = join_lines(request, best, result.alignments);
    size_t line = 0;
    for (size_t text_index = 0; text_index < request.lines_per_text.size(); ++text_index) {
      const size_t lines = request.lines_per_text[text_index];
      json sentences = json::array();
      const std::string& text = texts[text_index];
      for (size_t i = 0; i < lines; ++i, ++line) {
        const Translation& t = result.translations[line];
        json sentence{{"source", request.sentences[line]}, {"text", t.texts.front()}, {"truncated", t.truncated}};
        if (request.options.scores || request.options.search.nbest > 1) {
          json hypotheses = json::array();
          for (size_t k = 0; k < t.hypotheses.size(); ++k)
            hypotheses.push_back({{"text", t.texts[k]}, {"score", t.hypotheses[k].score}});
          sentence["hypotheses"] = std::move(hypotheses);
        }
        if (request.options.attention) sentence["attention"] = attention_json(result.attention[line]);
        if (request.options.alignments) sentence["alignment"] = to_pharaoh(result.alignments[line]);
        if (request.options.confidence) sentence["confidence"] = confidence_json({&result.confidence[line]});
        sentences.push_back(std::move(sentence));
      }
      translations.push_back({{"text", text}, {"sentences", std::move(sentences)}});
    }
    return json{{"translations", std::move(translations)}};
  }

  int bind() {
    int port = options.port;
    bool ok;
    if (port == 0) {
      port = server.bind_to_any_port(options.host);
      ok = port > 0;
    } else {
      ok = server.bind_to_port(options.host, port);
    }
    if (!ok)
      throw std::runtime_error("cannot listen on " + options.host + ":" + std::to_string(options.port) +
                               " (address in use, not an address of this machine, or not allowed)");
    // httplib listens with a backlog of 5: a burst of new clients (bench_serve's) overflowed it,
    // and the kernel retried their connections a second later, which set the tail latency.
    // Listening again on a listening socket only changes its backlog.
    if (listen_socket >= 0) ::listen(listen_socket, SOMAXCONN);
    return port;
  }

  void run() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stop_requested) return;
      running = true;
    }
    server.listen_after_bind();  // returns after stop(), once the pool's connections are done
    std::lock_guard<std::mutex> lock(mutex);
    finished = true;
    finished_cv.notify_all();
  }

  void stop() {
    std::unique_lock<std::mutex> lock(mutex);
    stop_requested = true;
    // httplib's stop() only acts once its loop runs: ask until run() has returned.
    while (running && !finished) {
      server.stop();
      finished_cv.wait_for(lock, std::chrono::milliseconds(20));
    }
  }
};

bool HttpServer::available() { return true; }

HttpServer::HttpServer(Translator& translator, TranslationService& service, ServiceMetrics& metrics,
                       ServerOptions options)
    : impl_(std::make_unique<Impl>(translator, service, metrics, std::move(options))) {}
HttpServer::~HttpServer() = default;
int HttpServer::bind() { return impl_->bind(); }
void HttpServer::run() { impl_->run(); }
void HttpServer::stop() { impl_->stop(); }

#else  // built without cpp-httplib

struct HttpServer::Impl {};
bool HttpServer::available() { return false; }
HttpServer::HttpServer(Translator&, TranslationService&, ServiceMetrics&, ServerOptions) {
  throw std::runtime_error(
      "this torchmt was built without cpp-httplib (Debian: libcpp-httplib-dev; tools/setup.sh installs it): no serve");
}
HttpServer::~HttpServer() = default;
int HttpServer::bind() { return 0; }
void HttpServer::run() {}
void HttpServer::stop() {}

#endif

}  // namespace torchmt
