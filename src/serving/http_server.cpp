#include "serving/http_server.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "decoding/document_translator.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/decoding/translator.h"
#include "serving/metrics.h"
#include "serving/translated_files.h"
#include "torchmt/serving/translation_service.h"
#include "torchmt/util/strings.h"
#include "util/utf8.h"

#if TORCHMT_WITH_HTTPLIB
#include <sys/socket.h>

#include <httplib.h>
#endif

namespace torchmt {

#if TORCHMT_WITH_HTTPLIB

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Apache's LimitRequestFields; a browser sends about 15.
constexpr size_t kMaxHeaderFields = 100;

// A job queued on a service, abandoned (its queued sentences dropped, its streamed ones ended)
// when the request stops waiting for it: an answer past the deadline, an error in another part.
struct Submitted {
  std::future<ServiceResult> future;
  std::shared_ptr<std::atomic<bool>> abandoned = std::make_shared<std::atomic<bool>>(false);
  Submitted() = default;
  Submitted(Submitted&&) = default;
  Submitted& operator=(Submitted&&) = default;
  ~Submitted() {
    if (abandoned) *abandoned = true;  // (harmless once the answer is in)
  }
};

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
  std::vector<ServedModel> models;
  ServiceMetrics& metrics;
  ServerOptions options;
  RequestLimiter limiter;
  TranslatedFiles files{64, 64 << 20, std::chrono::minutes(30)};
  int bound_port = 0;
  std::string languages_json, spec_json, settings_json;  // answers that never change
  httplib::Server server;
  std::mutex mutex;
  std::condition_variable finished_cv;
  bool stop_requested = false, running = false, finished = false;
  socket_t listen_socket = -1;

  Impl(std::vector<ServedModel> m, ServiceMetrics& me, ServerOptions o)
      : models(std::move(m)), metrics(me), options(std::move(o)) {
    if (models.empty()) throw std::invalid_argument("serve: no model");
    // A model trained on both directions (--both-directions) serves the reverse pair as well,
    // from the same translator and queue: its input's language says which way to translate.
    for (size_t i = 0, n = models.size(); i < n; ++i)
      if (const ServedModel m = models[i]; m.translator->languages().both_directions && !m.languages.source.empty())
        models.push_back({m.translator, m.service, m.name, {m.languages.target, m.languages.source}});
    options.api.search = options.translation.search;
    options.api.pairs.clear();
    auto identifier = std::make_shared<LanguageIdentifier>();
    for (const auto& model : models) {
      if (model.languages.source.empty() || model.languages.target.empty()) {
        if (models.size() > 1)
          throw std::invalid_argument(model.name + " records no languages: with several models each must (or serve it alone "
                                                   "with --source-language and --target-language)");
        continue;
      }
      for (const auto& p : options.api.pairs)
        if (p == model.languages)
          throw std::invalid_argument("two models translate " + p.source + " to " + p.target +
                                      " (an ensemble of them is one model: give them to one server as -m a -m b alone)");
      options.api.pairs.push_back(model.languages);
      identifier->merge(model.translator->languages().identifier);
    }
    if (!identifier->empty()) options.api.identifier = identifier;
    // Each model's reverse direction, for requests reranked with it.
    for (auto& model : models) {
      if (reverse_problem(*model.translator, nullptr).empty()) model.reverse = model.translator;
      for (const auto& other : models)
        if (!model.reverse && !model.languages.source.empty() && other.languages.source == model.languages.target &&
            other.languages.target == model.languages.source)
          model.reverse = other.translator;
      if (!model.reverse && options.reverse_model) {
        const std::string problem = reverse_problem(*model.translator, options.reverse_model);
        if (!problem.empty()) throw std::invalid_argument("--reverse-model " + problem + " (the reverse of " + model.name + ")");
        model.reverse = options.reverse_model;
      }
      if (!model.reverse && options.api.reverse_weight > 0)
        throw std::invalid_argument("--reverse-weight: " + model.name + " has no reverse model (serve one translating the "
                                    "other way beside it, give --reverse-model, or train with --both-directions)");
    }
    languages_json = dump(languages_answer());
    spec_json = dump(openapi_spec());
    settings_json = dump(frontend_settings());
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

  // LibreTranslate's [{code, name, targets}]: every language served, each with the targets it
  // can be translated into.
  json languages_answer() const {
    std::vector<std::string> codes;
    for (const auto& p : options.api.pairs)
      for (const auto* code : {&p.source, &p.target})
        if (std::find(codes.begin(), codes.end(), *code) == codes.end()) codes.push_back(*code);
    json list = json::array();
    for (const auto& code : codes) {
      json targets = json::array();
      for (const auto& p : options.api.pairs)
        if (p.source == code) targets.push_back(p.target);
      list.push_back({{"code", code}, {"name", language_name(code)}, {"targets", std::move(targets)}});
    }
    return list;
  }

  json frontend_settings() const {
    const LanguagePair first = options.api.pairs.empty() ? LanguagePair{"auto", "en"} : options.api.pairs.front();
    auto language = [](const std::string& code) {
      return json{{"code", code}, {"name", code == "auto" ? "Auto Detect" : language_name(code)}};
    };
    return json{{"charLimit", options.api.char_limit},
                {"frontendTimeout", 500},
                {"apiKeys", static_cast<bool>(options.api_keys)},
                {"keyRequired", options.require_api_key},
                {"suggestions", false},
                {"filesTranslation", options.files_translation},
                {"supportedFilesFormat", options.files_translation ? json::array({".txt", ".html"}) : json::array()},
                {"language", {{"source", language(first.source)}, {"target", language(first.target)}}}};
  }

  // The OpenAPI (Swagger 2.0, as LibreTranslate's /spec) description of the endpoints.
  static json openapi_spec() {
    auto form = [](const char* name, const char* description, bool required) {
      return json{{"in", "formData"}, {"name", name}, {"type", "string"}, {"required", required},
                  {"description", description}};
    };
    auto errors = [](json responses) {
      responses["400"] = {{"description", "Invalid request"}};
      responses["403"] = {{"description", "Missing or unknown API key"}};
      responses["429"] = {{"description", "Slow down (Retry-After)"}};
      responses["500"] = {{"description", "Translation error"}};
      return responses;
    };
    json key = form("api_key", "API key", false);
    json paths = {
        {"/translate",
         {{"post",
           {{"tags", {"translate"}},
            {"summary", "Translate text"},
            {"consumes", {"application/json", "application/x-www-form-urlencoded"}},
            {"parameters",
             {form("q", "Text(s) to translate", true), form("source", "Source language code, or \"auto\"", true),
              form("target", "Target language code", true), form("format", "text or html", false),
              form("alternatives", "Number of alternative translations", false), key}},
            {"responses", errors({{"200", {{"description", "Translation"}}}})}}}}},
        {"/detect",
         {{"post",
           {{"tags", {"translate"}},
            {"summary", "Detect the language of a single text"},
            {"parameters", {form("q", "Text to detect", true), key}},
            {"responses", errors({{"200", {{"description", "Detections"}}}})}}}}},
        {"/languages", {{"get", {{"tags", {"translate"}}, {"summary", "Retrieve list of supported languages"},
                                 {"responses", {{"200", {{"description", "List of languages"}}}}}}}}},
        {"/frontend/settings", {{"get", {{"tags", {"frontend"}}, {"summary", "Retrieve frontend specific settings"},
                                         {"responses", {{"200", {{"description", "frontend settings"}}}}}}}}},
        {"/health", {{"get", {{"summary", "Health check"}, {"responses", {{"200", {{"description", "ok"}}}}}}}}},
        {"/suggest", {{"post", {{"tags", {"feedback"}}, {"summary", "Submit a suggestion to improve a translation"},
                                {"responses", {{"403", {{"description", "Suggestions are disabled"}}}}}}}}},
        {"/translate_file",
         {{"post",
           {{"tags", {"translate"}},
            {"summary", "Translate file (.txt, .html)"},
            {"consumes", {"multipart/form-data"}},
            {"parameters",
             {{{"in", "formData"}, {"name", "file"}, {"type", "file"}, {"required", true}, {"description", "File to translate"}},
              form("source", "Source language code, or \"auto\"", true), form("target", "Target language code", true), key}},
            {"responses", errors({{"200", {{"description", "translatedFileUrl"}}}})}}}}},
        {"/v1/translate", {{"post", {{"tags", {"torchmt"}}, {"summary", "torchmt's API: search options, n-best, "
                                                                    "scores, attention, alignments, confidence"},
                                     {"consumes", {"application/json"}},
                                     {"responses", errors({{"200", {{"description", "Translations"}}}})}}}}},
    };
    return json{{"swagger", "2.0"},
                {"info", {{"title", "torchmt"}, {"version", TORCHMT_VERSION}, {"description", "Machine translation"}}},
                {"basePath", "/"},
                {"paths", std::move(paths)}};
  }

  // The paths and the one method each answers (anything else there is a 405).
  static const std::vector<std::pair<std::string, std::string>>& endpoints() {
    static const std::vector<std::pair<std::string, std::string>> list = {
        {"/", "GET"},           {"/health", "GET"},  {"/metrics", "GET"},         {"/languages", "GET"},
        {"/spec", "GET"},       {"/frontend/settings", "GET"}, {"/v1/health", "GET"}, {"/translate", "POST"},
        {"/v1/translate", "POST"}, {"/detect", "POST"}, {"/suggest", "POST"},     {"/translate_file", "POST"}};
    return list;
  }

  // The API key of a request (403 for an unknown one, or a missing one where keys are required)
  // and its request limit (429 with Retry-After beyond it). Returns the key's character limit.
  int64_t check_access(const httplib::Request& req, httplib::Response& res, const std::string& given) {
    int64_t per_minute = options.req_limit, char_limit = options.api.char_limit;
    std::string client = "address " + req.remote_addr;
    if (options.api_keys) {
      if (!given.empty()) {
        const auto key = options.api_keys->find(given);
        if (!key) throw ApiError(403, "Invalid API key");
        if (key->requests_per_minute > 0) per_minute = key->requests_per_minute;
        if (key->char_limit > 0) char_limit = key->char_limit;
        client = "key " + key->key;  // a key's limit holds whichever address it comes from
      } else if (options.require_api_key) {
        throw ApiError(403, "Please contact the server operator to get an API key");
      }
    }
    if (per_minute > 0) {
      if (const int64_t wait = limiter.take(client, per_minute); wait > 0) {
        res.set_header("Retry-After", std::to_string(wait));
        throw ApiError(429, "Slowdown: " + std::to_string(per_minute) + " per 1 minute");
      }
    }
    return char_limit;
  }

  void routes() {
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      // Nothing from anywhere else: the page runs on a machine without a network.
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' blob: data:");
      res.set_content(web_page_html(), "text/html; charset=utf-8");
    });
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    server.Get("/v1/health", [this](const httplib::Request&, httplib::Response& res) {
      json list = json::array();
      for (const auto& m : models)
        list.push_back({{"model", m.name},
                        {"source_language", m.languages.source},
                        {"target_language", m.languages.target},
                        {"device", m.translator->device().str()},
                        {"dtype", std::string(c10::toString(m.translator->dtype()))},
                        {"attention", static_cast<bool>(m.translator->model())}});
      res.set_content(dump(json{{"status", "ok"}, {"models", std::move(list)}}), "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.prometheus(), "text/plain; version=0.0.4");
    });
    server.Get("/languages", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(languages_json, "application/json");
    });
    server.Get("/spec", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(spec_json, "application/json");
    });
    server.Get("/frontend/settings", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(settings_json, "application/json");
    });
    server.Post("/translate", [this](const httplib::Request& req, httplib::Response& res) {
      timed(req, res, "/translate", [&] { libretranslate(req, res); });
    });
    server.Post("/v1/translate", [this](const httplib::Request& req, httplib::Response& res) {
      timed(req, res, "/v1/translate", [&] { v1(req, res); });
    });
    server.Post("/detect", [this](const httplib::Request& req, httplib::Response& res) {
      timed(req, res, "/detect", [&] { detect(req, res); });
    });
    server.Post("/suggest", [this](const httplib::Request& req, httplib::Response& res) {
      timed(req, res, "/suggest", [&] {
        const auto [type, body] = form_body(req);
        check_access(req, res, request_api_key(type, body));
        throw ApiError(403, "Suggestions are disabled on this server.");
      });
    });
    server.Post("/translate_file", [this](const httplib::Request& req, httplib::Response& res) {
      timed(req, res, "/translate_file", [&] { translate_file(req, res); });
    });
    server.Get(R"(/download_file/([0-9a-f]{32})/([A-Za-z0-9._-]+))", [this](const httplib::Request& req,
                                                                          httplib::Response& res) {
      const auto file = files.get(req.matches[1], req.matches[2]);
      if (!file) {
        reply_error(res, 404, "no such file (translated files are kept 30 minutes)");
        return;
      }
      res.set_header("Content-Disposition", "attachment; filename=\"" + file->name + "\"");
      res.set_content(file->bytes, file->content_type);
    });
    // What httplib 0.11 lets through before a handler sees a request, refused before the body is
    // read: a chunked body (read whole past --max-body-bytes), a Content-Length that is not one
    // number (two differing ones: a proxy in front may frame the request otherwise), a flood of
    // header fields. Range is ignored, as RFC 9110 allows: httplib cut any answer to it, a POST's
    // JSON included, and built hundreds of ranges of a page in memory.
    server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      auto refuse = [&res](int status, const std::string& message) {
        reply_error(res, status, message);
        return httplib::Server::HandlerResponse::Handled;
      };
      if (req.headers.size() > kMaxHeaderFields)
        return refuse(431, "too many header fields (" + std::to_string(req.headers.size()) + ", at most " +
                               std::to_string(kMaxHeaderFields) + ")");
      if (const std::string coding = req.get_header_value("Content-Encoding"); !coding.empty() && coding != "identity")
        return refuse(415, "Content-Encoding " + escape_control(coding) + " is not accepted (send the body as it is)");
      if (req.has_header("Transfer-Encoding"))
        return refuse(411, "a request body needs a Content-Length (Transfer-Encoding is not accepted)");
      const size_t lengths = req.get_header_value_count("Content-Length");
      for (size_t i = 0; i < lengths; ++i) {
        const std::string length = req.get_header_value("Content-Length", i);
        if (length.empty() || length.find_first_not_of("0123456789") != std::string::npos ||
            length != req.get_header_value("Content-Length", 0))
          return refuse(400, "invalid Content-Length");
      }
      const_cast<httplib::Request&>(req).ranges.clear();  // (httplib's own request, not a const object)
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Errors httplib answers itself (unknown path, body too large, malformed request line)
    // get the same JSON body as ours; a known path asked with another method is a 405.
    server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 404)
        for (const auto& [path, method] : endpoints())
          if (path == req.path) {
            res.status = 405;
            res.set_header("Allow", method);
          }
      std::string message;
      switch (res.status) {
        case 404: message = "no such endpoint: " + req.method + " " + req.path; break;
        case 405: message = "method not allowed: " + req.method + " " + req.path; break;
        case 413: message = "request body too large"; break;
        case 400: message = "malformed HTTP request"; break;
        case 408: message = "the request did not arrive in time"; break;
        case 414: message = "request URI too long"; break;
        case 416: message = "unsatisfiable Range"; break;
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
      // The POST endpoints count themselves (with their latency).
      if (req.method == "POST")
        for (const auto& [path, method] : endpoints())
          if (path == req.path && method == "POST") return;
      bool known = false;
      for (const auto& [path, method] : endpoints()) known = known || path == req.path;
      metrics.record_request(known ? req.path : "other", res.status, -1);
    });
  }

  // Runs an endpoint's work: its errors become their status and JSON body, its time a metric.
  template <typename Work>
  void timed(const httplib::Request&, httplib::Response& res, const std::string& endpoint, Work work) {
    const auto start = Clock::now();
    metrics.add_in_flight(1);
    try {
      work();
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

  // A request's sentences queued on one model's service.
  Submitted submit(const ServedModel& model, const ApiRequest& request) {
    Translator& translator = *model.translator;
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
    job.options.search.scores = request.options.scores || request.options.search.nbest > 1;  // as answered
    job.attention = request.options.attention;
    job.attention_layer = request.options.attention_layer;
    job.attention_head = request.options.attention_head;
    job.alignments = request.options.alignments || (markup && translator.model());
    job.confidence = request.options.confidence;
    job.confidence_model = options.confidence_model;
    job.reverse_weight = request.options.reverse_weight;
    if (job.reverse_weight > 0) {
      if (!model.reverse)
        throw ApiError(400, "reverse_weight: this server has no model translating the other way for " + model.name);
      job.reverse = model.reverse;
    }
    Submitted submitted;
    if (job.sentences.empty()) {  // a blank document has nothing to translate
      std::promise<ServiceResult> none;
      none.set_value({});
      submitted.future = none.get_future();
      return submitted;
    }
    job.abandoned = submitted.abandoned;
    submitted.future = model.service->submit(std::move(job));
    return submitted;
  }

  ServiceResult wait(Submitted& submitted, Clock::time_point deadline) {
    std::future<ServiceResult>& future = submitted.future;
    if (future.wait_until(deadline) != std::future_status::ready)
      throw ApiError(503, "the translation took longer than the request timeout (" +
                              real_text(options.request_timeout_s) + " s)");
    try {
      return future.get();
    } catch (const std::invalid_argument& e) {
      throw ApiError(400, e.what());
    }
  }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options.request_timeout_s));
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

  // LibreTranslate's answer for the texts of one job: each text's translation, alternatives and
  // confidence, in the job's order.
  struct TextAnswers {
    std::vector<std::string> texts;
    std::vector<std::vector<std::string>> alternatives;
    std::vector<json> confidence;
  };

  static TextAnswers text_answers(const ApiRequest& request, const ServiceResult& result) {
    TextAnswers out;
    std::vector<std::string> best;
    for (const auto& t : result.translations) best.push_back(t.texts.front());
    out.texts = join_lines(request, best, result.alignments);
    out.alternatives.resize(out.texts.size());
    for (int64_t k = 1; k < request.options.search.nbest; ++k) {
      std::vector<std::string> kth;
      for (const auto& t : result.translations)
        kth.push_back(static_cast<size_t>(k) < t.texts.size() ? t.texts[static_cast<size_t>(k)] : t.texts.front());
      auto joined = join_lines(request, kth);
      for (size_t i = 0; i < joined.size(); ++i) out.alternatives[i].push_back(joined[i]);
    }
    if (request.options.confidence) {
      size_t line = 0;
      for (size_t lines : request.lines_per_text) {
        std::vector<const SentenceConfidence*> sentences;
        for (size_t i = 0; i < lines; ++i, ++line) sentences.push_back(&result.confidence[line]);
        out.confidence.push_back(confidence_json(sentences));
      }
    }
    return out;
  }

  // A LibreTranslate request's texts translated: each by the model of its source language (its
  // detected one for "auto"; one already in the target comes back as sent).
  TextAnswers translate_texts(const LibreTranslateRequest& lt, const ApiSettings& settings,
                              std::vector<LanguageGuess>& detected) {
    const size_t n = lt.texts.size();
    std::vector<std::string> sources(n, lt.source);
    const bool automatic = lt.source == "auto";
    detected.assign(automatic ? n : 0, {});
    for (size_t i = 0; automatic && i < n; ++i) {
      detected[i] = detect_source(settings, lt.texts[i], lt.target);
      sources[i] = detected[i].language;
    }
    struct Part {
      std::vector<size_t> texts;
      ApiRequest request;
      Submitted result;
    };
    std::vector<Part> parts;
    std::vector<char> unchanged(n, 0);
    std::map<std::pair<size_t, std::string>, std::vector<size_t>> groups;  // (model, source) -> texts
    for (size_t i = 0; i < n; ++i) {
      if (automatic && !settings.pairs.empty() && sources[i] == lt.target) {
        unchanged[i] = 1;
        continue;
      }
      groups[{libretranslate_route(settings, sources[i], lt.target), sources[i]}].push_back(i);
    }
    for (auto& [key, texts] : groups) {
      Part part{texts, libretranslate_job(lt, texts, key.second, settings), {}};
      part.result = submit(models[key.first], part.request);
      parts.push_back(std::move(part));
    }
    const auto until = deadline();
    TextAnswers all;
    all.texts.resize(n);
    all.alternatives.resize(n);
    all.confidence.resize(n, confidence_json({}));
    for (size_t i = 0; i < n; ++i)
      if (unchanged[i]) all.texts[i] = lt.texts[i];
    for (auto& part : parts) {
      const ServiceResult result = wait(part.result, until);
      TextAnswers answers = text_answers(part.request, result);
      for (size_t k = 0; k < part.texts.size(); ++k) {
        const size_t i = part.texts[k];
        all.texts[i] = std::move(answers.texts[k]);
        all.alternatives[i] = std::move(answers.alternatives[k]);
        if (lt.options.confidence) all.confidence[i] = std::move(answers.confidence[k]);
      }
    }
    return all;
  }

  // A LibreTranslate request's content type and body; a multipart form (what LibreTranslate's own
  // page sends: FormData) becomes the JSON object of its fields, which httplib has parsed.
  static std::pair<std::string, std::string> form_body(const httplib::Request& req) {
    if (!req.is_multipart_form_data()) return {req.get_header_value("Content-Type"), req.body};
    json fields = json::object();
    for (const auto& [name, part] : req.files) {
      if (!is_valid_utf8(part.content) || !is_valid_utf8(name))
        throw ApiError(400, "request body is not valid UTF-8 (form field " + escape_control(name) + ")");
      if (part.filename.empty() && !fields.contains(name)) fields[name] = part.content;
    }
    return {"application/json", dump(fields)};
  }

  void libretranslate(const httplib::Request& req, httplib::Response& res) {
    const auto [type, body] = form_body(req);
    ApiSettings settings = options.api;
    settings.char_limit = check_access(req, res, request_api_key(type, body));
    const LibreTranslateRequest lt = read_libretranslate_request(type, body, settings);
    std::vector<LanguageGuess> detected;
    const TextAnswers all = translate_texts(lt, settings, detected);
    json out;
    out["translatedText"] = lt.list ? json(all.texts) : json(all.texts.front());
    if (lt.options.search.nbest > 1) out["alternatives"] = lt.list ? json(all.alternatives) : json(all.alternatives.front());
    if (lt.options.confidence) out["confidence"] = lt.list ? json(all.confidence) : all.confidence.front();
    if (!detected.empty()) {
      json list = json::array();
      for (const auto& d : detected) list.push_back({{"confidence", d.confidence}, {"language", d.language}});
      out["detectedLanguage"] = lt.list ? list : list.front();
    }
    res.status = 200;
    res.set_content(dump(out), "application/json");
  }

  // LibreTranslate's /translate_file: a .txt or .html file of a multipart form, translated with
  // its layout (the markup path for HTML), kept for /download_file.
  void translate_file(const httplib::Request& req, httplib::Response& res) {
    auto field = [&](const char* name) { return req.has_file(name) ? req.get_file_value(name).content : std::string(); };
    const int64_t char_limit = check_access(req, res, field("api_key"));
    if (!options.files_translation) throw ApiError(403, "Files translation are disabled on this server.");
    if (!req.has_file("file") || req.get_file_value("file").filename.empty())
      throw ApiError(400, "Invalid request: missing file parameter");
    const httplib::MultipartFormData& file = req.get_file_value("file");
    const std::string source = field("source"), target = field("target");
    if (source.empty()) throw ApiError(400, "Invalid request: missing source parameter");
    if (target.empty()) throw ApiError(400, "Invalid request: missing target parameter");
    if (file.content.empty()) throw ApiError(400, "Invalid request: empty file");
    const auto dot = file.filename.find_last_of('.');
    std::string extension = dot == std::string::npos ? "" : file.filename.substr(dot);
    for (auto& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool html = extension == ".html" || extension == ".htm";
    if (extension != ".txt" && !html) throw ApiError(400, "Invalid request: file format not supported");
    // The file's text as one text of a LibreTranslate request (its checks and messages), with room
    // for a file's sentences.
    ApiSettings settings = options.api;
    settings.char_limit = char_limit;
    settings.limits.max_sentences = options.max_file_sentences;
    if (!is_valid_utf8(file.content)) throw ApiError(400, "Invalid request: the file is not UTF-8 text");
    const std::string body = dump(json{{"q", file.content}, {"source", source}, {"target", target},
                                       {"format", html ? "html" : "text"}});
    const LibreTranslateRequest lt = read_libretranslate_request("application/json", body, settings);
    std::vector<LanguageGuess> detected;
    TextAnswers answers = translate_texts(lt, settings, detected);
    std::string stem = dot == std::string::npos ? file.filename : file.filename.substr(0, dot);
    stem = stem.substr(stem.find_last_of("/\\") == std::string::npos ? 0 : stem.find_last_of("/\\") + 1);
    for (auto& c : stem)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    const std::string name = (stem.empty() ? "file" : stem) + "." + target + extension;
    const std::string id = files.put(name, html ? "text/html; charset=utf-8" : "text/plain; charset=utf-8",
                                     std::move(answers.texts.front()));
    std::string host = req.get_header_value("Host");
    if (host.empty()) host = options.host + ":" + std::to_string(bound_port);
    res.status = 200;
    res.set_content(dump(json{{"translatedFileUrl", "http://" + host + "/download_file/" + id + "/" + name}}),
                    "application/json");
  }

  void v1(const httplib::Request& req, httplib::Response& res) {
    const std::string& type = req.get_header_value("Content-Type");
    ApiSettings settings = options.api;
    settings.char_limit = check_access(req, res, request_api_key(type, req.body));
    const ApiRequest request = parse_v1_request(type, req.body, settings);
    const ServedModel& model = models[v1_route(options.api, request.options)];
    auto future = submit(model, request);
    const ServiceResult result = wait(future, deadline());
    res.status = 200;
    res.set_content(dump(v1_answer(request, result)), "application/json");
  }

  void detect(const httplib::Request& req, httplib::Response& res) {
    const auto [type, body] = form_body(req);
    check_access(req, res, request_api_key(type, body));
    const DetectRequest request = parse_detect_request(type, body);
    if (!options.api.identifier)
      throw ApiError(400, "this server's model carries no language identifier (trained before torchmt 0.3): "
                          "no language detection");
    json answers = json::array();
    for (const auto& text : request.texts) {
      json guesses = json::array();
      for (const auto& g : options.api.identifier->detect(text))
        guesses.push_back({{"confidence", g.confidence}, {"language", g.language}});
      answers.push_back(std::move(guesses));
    }
    res.status = 200;
    res.set_content(dump(request.list ? answers : answers.front()), "application/json");
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
    bound_port = port;
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

HttpServer::HttpServer(std::vector<ServedModel> models, ServiceMetrics& metrics, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(models), metrics, std::move(options))) {}
HttpServer::~HttpServer() = default;
int HttpServer::bind() { return impl_->bind(); }
void HttpServer::run() { impl_->run(); }
void HttpServer::stop() { impl_->stop(); }

#else  // built without cpp-httplib

struct HttpServer::Impl {};
bool HttpServer::available() { return false; }
HttpServer::HttpServer(std::vector<ServedModel>, ServiceMetrics&, ServerOptions) {
  throw std::runtime_error(
      "this torchmt was built without cpp-httplib (Debian: libcpp-httplib-dev; tools/setup.sh installs it): no serve");
}
HttpServer::~HttpServer() = default;
int HttpServer::bind() { return 0; }
void HttpServer::run() {}
void HttpServer::stop() {}

#endif

}  // namespace torchmt
