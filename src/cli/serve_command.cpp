// torchmt serve: an HTTP translation service (LibreTranslate's API and torchmt's own, a web
// page, health and Prometheus metrics) with dynamic batching across requests. SIGINT/SIGTERM
// stop accepting, answer what is in flight, and exit 0.
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "cli_options.h"
#include "torchmt/data/language_identifier.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/kernels/runtime.h"
#include "torchmt/loading/model_loader.h"
#include "serving/http_server.h"
#include "serving/metrics.h"
#include "torchmt/serving/translation_service.h"
#include "util/stop_signals.h"

namespace torchmt::cli {
namespace {

struct ServeCommandOptions {
  TranslatorConfig translator;
  ServerOptions server;
  ServiceOptions service;
  ReverseRescoring rescoring;
  std::string confidence_model, source_language, target_language, api_keys;
  bool disable_files = false;
};

const OptionTable<ServeCommandOptions>& serve_option_table() {
  using O = ServeCommandOptions;
  const OptionExtra http{"", "server", {}};
  static const auto table =
      OptionTable<O>("serve")
          .include(translator_option_table(), &O::translator)
          .include(reverse_rescoring_option_table(), &O::rescoring)
          .add("host", [](O& o) -> std::string& { return o.server.host; },
               "address to listen on (0.0.0.0 = every interface: anyone who reaches the machine can use it)", http)
          .add("port", [](O& o) -> int& { return o.server.port; }, "TCP port (0 = any free port, printed at start)", http)
          .add("max_batch_tokens", [](O& o) -> int64_t& { return o.service.max_batch_tokens; },
               "source tokens per batch, packed across requests", http)
          .add("max_wait_ms", [](O& o) -> double& { return o.service.max_wait_ms; },
               "how long a request waits for others to share its batch", http)
          .add("continuous", [](O& o) -> bool& { return o.service.continuous; },
               "in-flight batching: greedy requests join a running batch between decoding steps "
               "(--continuous=false: whole batches)", http)
          .add("max_batch_rows", [](O& o) -> int64_t& { return o.service.max_batch_rows; },
               "sentences in a worker's running batch (in-flight batching)", http)
          .add("max_queue_sentences", [](O& o) -> int64_t& { return o.service.max_queue_sentences; },
               "sentences waiting at most; beyond, requests get 503", http)
          .add("max_body_bytes", [](O& o) -> int64_t& { return o.server.max_body_bytes; },
               "request body size cap (413 beyond)", http)
          .add("max_sentences", [](O& o) -> int64_t& { return o.server.api.limits.max_sentences; },
               "lines per request cap (413 beyond)", http)
          .add("max_sentence_chars", [](O& o) -> int64_t& { return o.server.api.limits.max_sentence_chars; },
               "characters per line cap (413 beyond)", http)
          .add("max_beam", [](O& o) -> int64_t& { return o.server.api.limits.max_beam; },
               "largest beam (and n-best) a request may ask for", http)
          .add("request_timeout", [](O& o) -> double& { return o.server.request_timeout_s; },
               "seconds a request may wait for its translation (503 beyond)", http)
          .add("read_timeout", [](O& o) -> double& { return o.server.read_timeout_s; },
               "seconds a client has to send its request", http)
          .add("connections", [](O& o) -> int64_t& { return o.server.connections; },
               "connections served at once (more wait their turn)", http)
          .add("source_language", &O::source_language,
               "the source language of a model that does not record it (trained before torchmt 0.3)", http)
          .add("target_language", &O::target_language, "the target language of such a model", http)
          .add("api_keys", &O::api_keys,
               "a file of API keys, `KEY [REQUESTS_PER_MINUTE [CHAR_LIMIT]]` per line: an unknown key is refused (403)",
               http)
          .add("require_api_key", [](O& o) -> bool& { return o.server.require_api_key; },
               "refuse requests without a key too (needs --api-keys)", http)
          .add("req_limit", [](O& o) -> int64_t& { return o.server.req_limit; },
               "requests per minute per client address (-1 = no limit; a key's own limit replaces it)", http)
          .add("char_limit", [](O& o) -> int64_t& { return o.server.api.char_limit; },
               "characters per text of a request, /v1/translate's too (-1 = no limit beyond --max-sentence-chars)", http)
          .add("disable_files_translation", [](O& o) -> bool& { return o.disable_files; },
               "refuse POST /translate_file (403), as LibreTranslate's flag", http)
          .add("max_file_sentences", [](O& o) -> int64_t& { return o.server.max_file_sentences; },
               "sentences of a file /translate_file translates (413 beyond)", http)
          .add("batch_limit", [](O& o) -> int64_t& { return o.server.api.batch_limit; },
               "texts per LibreTranslate list request (-1 = no limit beyond --max-sentences)", http)
          .add("confidence_model", &O::confidence_model,
               "the calibration (torchmt confidence --fit) of the confidence requests ask for (default: the raw "
               "estimate)", http);
  return table;
}

void validate(const ServeCommandOptions& o) {
  auto positive = [](double v, const char* flag) {
    if (!(v > 0)) throw std::invalid_argument(std::string("--") + flag + " must be positive");
  };
  if (o.server.port < 0 || o.server.port > 65535) throw std::invalid_argument("--port must be between 0 and 65535");
  positive(static_cast<double>(o.service.max_batch_tokens), "max-batch-tokens");
  if (!(o.service.max_wait_ms >= 0)) throw std::invalid_argument("--max-wait-ms must be 0 or more");
  positive(static_cast<double>(o.service.max_queue_sentences), "max-queue-sentences");
  positive(static_cast<double>(o.service.max_batch_rows), "max-batch-rows");
  positive(static_cast<double>(o.server.max_body_bytes), "max-body-bytes");
  positive(static_cast<double>(o.server.api.limits.max_sentences), "max-sentences");
  positive(static_cast<double>(o.server.api.limits.max_sentence_chars), "max-sentence-chars");
  positive(static_cast<double>(o.server.api.limits.max_beam), "max-beam");
  positive(o.server.request_timeout_s, "request-timeout");
  positive(o.server.read_timeout_s, "read-timeout");
  positive(static_cast<double>(o.server.connections), "connections");
  positive(static_cast<double>(o.server.max_file_sentences), "max-file-sentences");
  if (o.source_language.empty() != o.target_language.empty())
    throw std::invalid_argument("--source-language and --target-language go together");
  if (!o.source_language.empty()) check_language_code(o.source_language, "--source-language");
  if (!o.target_language.empty()) check_language_code(o.target_language, "--target-language");
  if (o.server.require_api_key && o.api_keys.empty()) throw std::invalid_argument("--require-api-key needs --api-keys");
  if (o.server.req_limit == 0 || o.server.req_limit < -1) throw std::invalid_argument("--req-limit must be >= 1 (or -1: none)");
  if (o.server.api.char_limit == 0 || o.server.api.char_limit < -1)
    throw std::invalid_argument("--char-limit must be >= 1 (or -1: none)");
  if (o.server.api.batch_limit == 0 || o.server.api.batch_limit < -1)
    throw std::invalid_argument("--batch-limit must be >= 1 (or -1: none)");
}

int run_serve(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(serve_option_table(),
                         "Serve a model over HTTP: LibreTranslate's POST /translate, POST /v1/translate, a web page "
                         "at /, GET /health and GET /metrics.",
                         argc, argv, code);
  if (!o) return code;
  if (!check_usage([&] { validate(*o); }, argv[0])) return kExitUsage;
  std::shared_ptr<const ConfidenceModel> confidence_model;
  std::shared_ptr<const ApiKeys> server_options_keys;
  if (!o->confidence_model.empty() &&
      !check_usage([&] { confidence_model = std::make_shared<const ConfidenceModel>(ConfidenceModel::load(o->confidence_model)); },
                   argv[0]))
    return kExitUsage;
  if (!HttpServer::available()) {
    std::cerr << argv[0] << ": this torchmt was built without cpp-httplib (Debian: libcpp-httplib-dev; "
                            "tools/setup.sh installs it)\n";
    return kExitFailure;
  }
  if (!o->api_keys.empty() &&
      !check_usage([&] { server_options_keys = std::make_shared<const ApiKeys>(ApiKeys::load(o->api_keys)); }, argv[0]))
    return kExitUsage;
  // One translator per direction the models record (an ensemble where several share one), each
  // with its own batching queue and its share of the workers.
  std::vector<DirectionModel> loaded;
  o->translator.runtime = Runtime::from_environment();
  if (!check_usage([&] { loaded = load_translators_by_direction(o->translator); }, argv[0])) return kExitUsage;
  std::unique_ptr<Translator> reverse_model;
  if (!check_usage([&] { reverse_model = load_reverse_model(o->rescoring, o->translator); }, argv[0])) return kExitUsage;
  ServiceMetrics metrics;
  std::vector<std::unique_ptr<TranslationService>> services;
  std::vector<ServedModel> served;
  const int64_t directions = static_cast<int64_t>(loaded.size());
  for (auto& model : loaded) {
    ServiceOptions service_options = o->service;
    service_options.workers = o->translator.translation.workers;
    if (directions > 1) {
      const int64_t workers = service_options.workers > 0 ? service_options.workers
                                                          : model.translator.plan_workers(o->translator.translation, 1 << 20).workers;
      service_options.workers = std::max<int64_t>(1, workers / directions);
    }
    service_options.threads_per_worker = o->translator.translation.threads_per_worker;
    services.push_back(std::make_unique<TranslationService>(model.translator, service_options, &metrics));
    LanguagePair languages{model.translator.languages().source, model.translator.languages().target};
    if (languages.source.empty()) {
      languages = {o->source_language, o->target_language};
    } else if (const LanguagePair given{o->source_language, o->target_language};
               !given.source.empty() && !(languages == given) &&
               !(model.translator.languages().both_directions && languages == LanguagePair{given.target, given.source})) {
      return usage_error(argv[0], model.name + " translates " + languages.source + " to " + languages.target + ", not " +
                                      o->source_language + " to " + o->target_language + " (--source-language, --target-language)");
    }
    served.push_back({&model.translator, services.back().get(), model.name, languages});
  }
  ServerOptions server_options = o->server;
  server_options.translation = o->translator.translation;
  server_options.confidence_model = confidence_model;
  server_options.api_keys = server_options_keys;
  server_options.files_translation = !o->disable_files;
  server_options.api.reverse_weight = o->rescoring.weight;
  server_options.reverse_model = reverse_model.get();
  std::unique_ptr<HttpServer> server_ptr;
  if (!check_usage([&] { server_ptr = std::make_unique<HttpServer>(served, metrics, server_options); }, argv[0]))
    return kExitUsage;
  HttpServer& server = *server_ptr;
  const int port = server.bind();

  StopSignals signals;  // from here on SIGINT/SIGTERM stop the server gracefully
  std::atomic<bool> finished{false};
  std::thread runner([&] {
    server.run();
    finished = true;
  });
  std::cerr << "torchmt serve: listening on http://" << o->server.host << ":" << port << "/" << std::endl;
  for (size_t i = 0; i < served.size(); ++i) {
    const Translator& t = *served[i].translator;
    const std::string direction =
        served[i].languages.source.empty() ? "" : served[i].languages.source + " -> " + served[i].languages.target + ": ";
    std::cerr << "torchmt serve: " << direction << served[i].name << " (" << t.device().str() << ", "
              << c10::toString(t.dtype()) << ", " << services[i]->plan().workers << " workers x "
              << services[i]->plan().threads_per_worker << " threads)" << std::endl;
    if (!t.dtype_reason().empty()) std::cerr << "torchmt serve: dtype auto: " << t.dtype_reason() << std::endl;
  }
  if (o->rescoring.enabled())
    std::cerr << "torchmt serve: beams reranked with the reverse direction (--reverse-weight "
              << o->rescoring.weight << ")" << std::endl;
  if (o->server.host != "127.0.0.1" && o->server.host != "localhost" && o->server.host != "::1")
    std::cerr << "torchmt serve: warning: listening on " << o->server.host
              << ", not on loopback only: whoever reaches this address can use the server" << std::endl;
  while (!StopSignals::requested() && !finished) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::cerr << "torchmt serve: stopping (answering the requests in flight)" << std::endl;
  server.stop();
  runner.join();
  for (auto& service : services) service->stop();
  std::cerr << "torchmt serve: stopped" << std::endl;
  return kExitOk;
}

const CommandRegistration serve_registration({"serve", "serve a model over HTTP (LibreTranslate API, web page, metrics)",
                                        run_serve, 45});

}  // namespace
}  // namespace torchmt::cli
