// The server's parts below HTTP: request parsing (LibreTranslate's API and /v1), metrics, and the
// dynamic batcher (concurrent requests, shared batches, answers to their own request).
// tests/serve_test.py runs the `torchmt serve` binary itself (serve_process_test below).
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <thread>

#include "data_test_support.h"
#include "torchmt/data/language_identifier.h"
#include "data/text_file.h"
#include "io/checkpoint.h"
#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/loading/model_loader.h"
#include "serving/http_api.h"
#include "serving/http_server.h"
#include "serving/metrics.h"
#include "torchmt/serving/translation_service.h"

namespace torchmt {
namespace {

ApiSettings settings() {
  ApiSettings s;
  s.limits.max_sentences = 4;
  s.limits.max_sentence_chars = 10;
  s.limits.max_beam = 8;
  s.pairs = {{"de", "en"}};
  return s;
}

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status();
  }
  return 0;
}

TEST(HttpApi, LibreTranslateJsonAndFormBodies) {
  auto r = parse_libretranslate_request("application/json; charset=utf-8",
                                        R"({"q": "Guten Tag.", "source": "de", "target": "en", "format": "text", "api_key": ""})",
                                        settings());
  EXPECT_EQ(r.sentences, std::vector<std::string>{"Guten Tag."});
  EXPECT_FALSE(r.list);
  r = parse_libretranslate_request("application/json", R"({"q": ["a", "b\r\nc"], "source": "auto"})", settings());
  EXPECT_TRUE(r.list);
  EXPECT_EQ(r.sentences, (std::vector<std::string>{"a", "b", "c"}));  // a text's lines are sentences
  EXPECT_EQ(r.lines_per_text, (std::vector<size_t>{1, 2}));
  r = parse_libretranslate_request("application/x-www-form-urlencoded", "q=Guten+Tag%21&source=de&target=en",
                                   settings());
  EXPECT_EQ(r.sentences, std::vector<std::string>{"Guten Tag!"});
  r = parse_libretranslate_request("application/json", R"({"q": "x", "alternatives": 2})", settings());
  EXPECT_EQ(r.options.search.nbest, 3);
  EXPECT_GE(r.options.search.beam_size, 3);
}

TEST(HttpApi, BadRequestsGetTheirStatus) {
  const auto s = settings();
  auto lt = [&](const std::string& type, const std::string& body) {
    return status_of([&] { parse_libretranslate_request(type, body, s); });
  };
  EXPECT_EQ(lt("application/json", R"({"source": "de"})"), 400);           // no q
  EXPECT_EQ(lt("application/json", R"({"q": )"), 400);                     // malformed JSON
  EXPECT_EQ(lt("application/json", R"(["q"])"), 400);                      // not an object
  EXPECT_EQ(lt("application/json", "{\"q\": \"\xff\"}"), 400);             // invalid UTF-8
  EXPECT_EQ(lt("application/json", R"({"q": 5})"), 400);                   // q of the wrong type
  EXPECT_EQ(lt("application/json", R"({"q": ["a", 1]})"), 400);
  EXPECT_EQ(lt("application/json", R"({"q": "a", "source": "fr"})"), 400);  // another language
  EXPECT_EQ(lt("application/json", R"({"q": "a", "format": "xml"})"), 400);
  EXPECT_EQ(lt("application/json", R"({"q": "a", "format": "html", "alternatives": 1})"), 400);
  EXPECT_EQ(lt("application/json", R"({"q": "<b title='0123456789012345678901234567890123456789'>a</b>", "format": "html"})"),
            413);  // the text cap (sentences x characters) applies before parsing
  EXPECT_EQ(lt("application/json", R"({"q": ["1", "2", "3", "4", "5"]})"), 413);  // > 4 sentences
  EXPECT_EQ(lt("application/json", R"({"q": "a\nb\nc\nd\ne"})"), 413);             // lines count
  EXPECT_EQ(lt("application/json", R"({"q": "elf Zeichen"})"), 413);               // > 10 characters
  EXPECT_EQ(lt("application/json", R"({"q": "zehn Zeich"})"), 0);                  // exactly 10
  EXPECT_EQ(lt("application/json", R"({"q": "äöüäöüäöüä"})"), 0);                  // characters, not bytes
  EXPECT_EQ(lt("application/x-www-form-urlencoded", "q=%zz"), 400);
  EXPECT_EQ(lt("multipart/form-data", "--x"), 415);
  EXPECT_EQ(lt("application/json", R"({"q": "a", "alternatives": 8})"), 400);  // beyond max_beam
  EXPECT_EQ(lt("application/json", R"({"q": "a", "alternatives": 18446744073709551615})"), 400);  // not wrapped to -1
  try {
    parse_libretranslate_request("application/json", R"({"source": "de"})", s);
  } catch (const ApiError& e) {
    EXPECT_STREQ(e.what(), "Invalid request: missing q parameter");  // LibreTranslate's words
  }
}

// LibreTranslate's endpoint splits lines into sentences and takes HTML; /v1 does on request.
TEST(HttpApi, DocumentsBecomeSentences) {
  auto r = parse_libretranslate_request("application/json", R"({"q": ["Ja. Nein!", "a\nBa."]})", settings());
  EXPECT_EQ(r.sentences, (std::vector<std::string>{"Ja.", "Nein!", "a", "Ba."}));
  EXPECT_EQ(r.lines_per_text, (std::vector<size_t>{2, 2}));
  ASSERT_EQ(r.documents.size(), 2u);
  r = parse_libretranslate_request("application/json", R"({"q": "<p>Ja. <b>Nein</b>!</p>", "format": "html"})",
                                   settings());
  EXPECT_EQ(r.sentences, (std::vector<std::string>{"Ja.", "Nein!"}));
  EXPECT_TRUE(r.documents[0].needs_alignments());
  r = parse_v1_request("application/json", R"({"q": "Ja. Nein!"})", settings());
  EXPECT_EQ(r.sentences, (std::vector<std::string>{"Ja. Nein!"}));  // /v1: lines unless asked
  EXPECT_TRUE(r.documents.empty());
  r = parse_v1_request("application/json", R"({"q": "Ja. Nein!", "split_sentences": true, "alignments": true})",
                       settings());
  EXPECT_EQ(r.sentences, (std::vector<std::string>{"Ja.", "Nein!"}));
  EXPECT_TRUE(r.options.alignments);
  // LibreTranslate's `if not q`: an empty text is a missing one.
  EXPECT_EQ(status_of([&] { parse_libretranslate_request("application/json", R"({"q": ""})", settings()); }), 400);
  EXPECT_EQ(status_of([&] { parse_v1_request("application/json", R"({"q": "a", "format": "html", "nbest": 2, "beam": 2})", settings()); }),
            400);
}

TEST(HttpApi, V1TakesTargetPrefixesShapedAsQAndSamplingOptions) {
  const auto s = settings();
  auto r = parse_v1_request("application/json",
                            R"({"q": ["a\nb", "c"], "target_prefix": ["x\n", "z"], "sampling_topk": 0,
                                "sampling_topp": 0.9, "sampling_temperature": 0.5, "seed": 12})",
                            s);
  EXPECT_EQ(r.sentences, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r.target_prefixes, (std::vector<std::string>{"x", "", "z"}));
  EXPECT_EQ(r.options.search.sampling_topk, 0);
  EXPECT_DOUBLE_EQ(r.options.search.sampling_topp, 0.9);
  EXPECT_DOUBLE_EQ(r.options.search.sampling_temperature, 0.5);
  EXPECT_EQ(r.options.search.seed, 12);
  EXPECT_TRUE(parse_v1_request("", R"({"q": "a"})", s).target_prefixes.empty());
  auto v1 = [&](const std::string& body) { return status_of([&] { parse_v1_request("application/json", body, s); }); };
  EXPECT_EQ(v1(R"({"q": "a", "target_prefix": "x"})"), 0);
  EXPECT_EQ(v1(R"({"q": "a", "target_prefix": ["x"]})"), 400);       // a list for a string
  EXPECT_EQ(v1(R"({"q": ["a", "b"], "target_prefix": ["x"]})"), 400);  // too few
  EXPECT_EQ(v1(R"({"q": "a", "target_prefix": "x\ny"})"), 400);      // more lines than q
  EXPECT_EQ(v1(R"({"q": "a", "target_prefix": 3})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "sampling_topk": 0, "sampling_topp": 1.5})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "sampling_topk": 3, "beam": 2})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "sampling_temperature": 2})"), 400);  // without sampling
  EXPECT_EQ(v1(R"({"q": "a", "sampling_topk": -1})"), 400);
}

TEST(HttpApi, V1TakesTheTokenRules) {
  const auto s = settings();
  auto r = parse_v1_request("application/json",
                            R"({"q": "a", "min_len": 3, "disable_unk": true, "no_repeat_ngram_size": 2,
                                "repetition_penalty": 1.5, "beam": 2, "patience": 1.5})",
                            s);
  EXPECT_EQ(r.options.search.min_length, 3);
  EXPECT_TRUE(r.options.search.disable_unk);
  EXPECT_EQ(r.options.search.no_repeat_ngram_size, 2);
  EXPECT_DOUBLE_EQ(r.options.search.repetition_penalty, 1.5);
  EXPECT_DOUBLE_EQ(r.options.search.patience, 1.5);
  EXPECT_FALSE(parse_v1_request("", R"({"q": "a"})", s).options.search.token_rules());
  auto v1 = [&](const std::string& body) { return status_of([&] { parse_v1_request("application/json", body, s); }); };
  EXPECT_EQ(v1(R"({"q": "a", "min_len": -1})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "no_repeat_ngram_size": 5000})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "repetition_penalty": 0})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "disable_unk": "maybe"})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "patience": 0})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "patience": 1e9})"), 400);
}

TEST(HttpApi, V1TakesConstraintsShapedAsQ) {
  const auto s = settings();
  auto r = parse_v1_request("application/json", R"({"q": ["a", "b\nc", "d"], "constraints": [["x", "y z"], [], ["w"]]})", s);
  EXPECT_EQ(r.sentences, (std::vector<std::string>{"a", "b", "c", "d"}));
  ASSERT_EQ(r.constraints.size(), 4u);
  EXPECT_EQ(r.constraints[0], (std::vector<std::string>{"x", "y z"}));
  EXPECT_TRUE(r.constraints[1].empty());
  EXPECT_TRUE(r.constraints[2].empty());
  EXPECT_EQ(r.constraints[3], (std::vector<std::string>{"w"}));
  r = parse_v1_request("application/json", R"({"q": "a", "constraints": ["x"]})", s);
  EXPECT_EQ(r.constraints, (std::vector<std::vector<std::string>>{{"x"}}));
  EXPECT_TRUE(parse_v1_request("", R"({"q": "a"})", s).constraints.empty());
  auto v1 = [&](const std::string& body) { return status_of([&] { parse_v1_request("application/json", body, s); }); };
  EXPECT_EQ(v1(R"({"q": "a", "constraints": "x"})"), 400);              // a string, not a list
  EXPECT_EQ(v1(R"({"q": ["a"], "constraints": ["x"]})"), 400);          // a list for each text
  EXPECT_EQ(v1(R"({"q": ["a", "b"], "constraints": [["x"]]})"), 400);   // too few
  EXPECT_EQ(v1(R"({"q": "a", "constraints": [3]})"), 400);
  EXPECT_EQ(v1(R"({"q": "a\nb", "constraints": ["x"]})"), 400);        // which line?
  EXPECT_EQ(v1(R"({"q": "a\nb", "constraints": []})"), 0);
  EXPECT_EQ(v1(R"({"q": "a", "constraints": ["x"], "sampling_topk": 0})"), 400);
}

TEST(HttpApi, V1OptionsGoThroughTheRequestTable) {
  const auto s = settings();
  auto r = parse_v1_request("application/json",
                            R"({"q": "a", "beam": 4, "nbest": 2, "lenpen": 1.0, "max_len_b": 20, "scores": true,
                                "attention": true, "attention_head": 1})",
                            s);
  EXPECT_EQ(r.options.search.beam_size, 4);
  EXPECT_EQ(r.options.search.nbest, 2);
  EXPECT_DOUBLE_EQ(r.options.search.length_penalty, 1.0);
  EXPECT_EQ(r.options.search.max_len_b, 20);
  EXPECT_TRUE(r.options.scores);
  EXPECT_TRUE(r.options.attention);
  EXPECT_EQ(r.options.attention_head, 1);
  // Unset keys keep the server's defaults.
  r = parse_v1_request("", R"({"q": "a"})", s);
  EXPECT_EQ(r.options.search.beam_size, s.search.beam_size);
  EXPECT_EQ(r.options.search.max_len_a, s.search.max_len_a);
  // curl -d sends a form content type: a JSON object is still read.
  EXPECT_EQ(parse_v1_request("application/x-www-form-urlencoded", R"({"q": "a"})", s).sentences.size(), 1u);
  auto v1 = [&](const std::string& body) { return status_of([&] { parse_v1_request("application/json", body, s); }); };
  EXPECT_EQ(v1(R"({"q": "a", "bogus": 1})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "beam": 9})"), 400);    // > max_beam
  EXPECT_EQ(v1(R"({"q": "a", "beam": 0})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "beam": 2, "nbest": 3})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "beam": "many"})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "beam": [1]})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "lenpen": -1})"), 400);
  EXPECT_EQ(status_of([&] { parse_v1_request("text/csv", R"({"q": "a"})", s); }), 415);
  try {
    parse_v1_request("application/json", R"({"q": "a", "bogus": 1})", s);
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_json("bad \"x\"\n\xff"), "{\"error\":\"bad \\\"x\\\"\\n\xEF\xBF\xBD\"}");
}

// reverse_weight: the server's weight is the default of requests with a beam; a request asks for
// it with a beam, in range.
TEST(HttpApi, ReverseWeightDefaultsToTheServersForABeam) {
  auto s = settings();
  s.search.beam_size = 4;
  s.reverse_weight = 0.3;
  EXPECT_DOUBLE_EQ(parse_v1_request("", R"({"q": "a"})", s).options.reverse_weight, 0.3);
  EXPECT_DOUBLE_EQ(parse_v1_request("", R"({"q": "a", "beam": 1})", s).options.reverse_weight, 0);
  EXPECT_DOUBLE_EQ(parse_v1_request("", R"({"q": "a", "reverse_weight": 0})", s).options.reverse_weight, 0);
  EXPECT_DOUBLE_EQ(parse_v1_request("", R"({"q": "a", "beam": 2, "reverse_weight": 1.5})", s).options.reverse_weight, 1.5);
  auto v1 = [&](const std::string& body) { return status_of([&] { parse_v1_request("application/json", body, s); }); };
  EXPECT_EQ(v1(R"({"q": "a", "beam": 1, "reverse_weight": 0.5})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "reverse_weight": -0.5})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "reverse_weight": 11})"), 400);
  EXPECT_EQ(v1(R"({"q": "a", "reverse_weight": "much"})"), 400);
  const std::string lt = R"({"q": "a", "source": "de", "target": "en"})";
  EXPECT_DOUBLE_EQ(parse_libretranslate_request("application/json", lt, s).options.reverse_weight, 0.3);
  s.search.beam_size = 1;
  EXPECT_DOUBLE_EQ(parse_libretranslate_request("application/json", lt, s).options.reverse_weight, 0);
}

TEST(ServiceMetricsText, CountersAndCumulativeHistograms) {
  ServiceMetrics m;
  m.record_request("/translate", 200, 0.02);
  m.record_request("/translate", 200, 0.3);
  m.record_request("/translate", 413, 0.001);
  m.record_batch(3, 5, 40, 50, 0.1);
  int direction_a = 0, direction_b = 0;  // two services' queues: the gauges are their sum
  m.set_queue(&direction_a, 2, 7);
  m.set_queue(&direction_b, 1, 3);
  m.set_queue(&direction_b, 1, 3);
  EXPECT_NE(m.prometheus().find("torchmt_queue_sentences 10\n"), std::string::npos);
  m.set_queue(&direction_b, 0, 0);
  const auto text = m.prometheus();
  EXPECT_NE(text.find("torchmt_queue_requests 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("torchmt_requests_total{endpoint=\"/translate\",code=\"200\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("torchmt_requests_total{endpoint=\"/translate\",code=\"413\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("torchmt_request_duration_seconds_bucket{le=\"0.025\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("torchmt_request_duration_seconds_bucket{le=\"0.5\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("torchmt_request_duration_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("torchmt_batch_sentences_bucket{le=\"4\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("torchmt_batch_sentences_bucket{le=\"8\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("torchmt_sentences_total 5\n"), std::string::npos);
  EXPECT_NE(text.find("torchmt_queue_sentences 7\n"), std::string::npos);
  EXPECT_EQ(m.batches(), 1);
  EXPECT_DOUBLE_EQ(m.mean_batch_sentences(), 5.0);
}

using test::random_translator;

// 24 clients at once, one sentence each: every answer is its own sentence's (as translate()
// gives it alone), and the batcher put several requests into one batch, or, with in-flight
// batching, into one decoding step.
TEST(TranslationService, ConcurrentRequestsShareBatchesAndGetTheirOwnAnswers) {
  auto translator = random_translator();
  auto lines = read_lines(test::sample_de());
  lines.resize(24);
  TranslationOptions options;
  std::vector<std::string> expected;
  for (const auto& line : lines) expected.push_back(translator.translate_text({line}, options).front());

  for (bool continuous : {true, false}) {
    SCOPED_TRACE(continuous ? "in-flight batching" : "whole batches");
    ServiceMetrics metrics;
    ServiceOptions service_options;
    service_options.max_wait_ms = 200;  // long enough for the 24 threads to arrive together
    service_options.continuous = continuous;
    TranslationService service(translator, service_options, &metrics);
    EXPECT_EQ(service.continuous(), continuous);
    std::vector<std::future<ServiceResult>> answers(lines.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < lines.size(); ++i)
      clients.emplace_back([&, i] { answers[i] = service.submit(ServiceJob{{lines[i]}, options}); });
    for (auto& c : clients) c.join();
    for (size_t i = 0; i < lines.size(); ++i) {
      auto result = answers[i].get();
      ASSERT_EQ(result.translations.size(), 1u);
      EXPECT_EQ(result.translations[0].texts.front(), expected[i]) << "sentence " << i;
    }
    if (continuous) {
      EXPECT_EQ(metrics.batches(), 0);
      EXPECT_GT(metrics.mean_step_rows(), 1.0);
    } else {
      EXPECT_LT(metrics.batches(), static_cast<int64_t>(lines.size()));
      EXPECT_GT(metrics.mean_batch_sentences(), 1.0);
      EXPECT_EQ(metrics.steps(), 0);
    }
  }
}

// In-flight batching: requests join a running batch between steps, as soon as there is room
// (here room for a long sentence and, one after another, shorter requests beside it),
// and get translate()'s strings.
TEST(TranslationService, RequestsJoinARunningBatchWhenThereIsRoom) {
  auto translator = random_translator();
  auto lines = read_lines(test::sample_de());
  lines.resize(24);
  TranslationOptions options;
  std::vector<std::vector<Translation>> expected;
  size_t longest = 0;
  auto length = [&](size_t i) { return expected[i][0].hypotheses[0].tokens.size(); };
  for (size_t i = 0; i < lines.size(); ++i) {
    expected.push_back(translator.translate({lines[i]}, options));
    if (length(i) > length(longest)) longest = i;
  }
  ServiceMetrics metrics;
  ServiceOptions service_options;
  service_options.workers = 1;
  service_options.max_batch_rows = 3;  // the long sentence and one request of two lines (one blank)
  service_options.max_wait_ms = 500;  // every request below is queued before the first step
  TranslationService service(translator, service_options, &metrics);
  auto first = service.submit(ServiceJob{{lines[longest]}, options});
  std::vector<std::future<ServiceResult>> later;
  std::vector<size_t> later_lines;
  for (size_t i = 0; i < lines.size() && later.size() < 6; ++i) {
    if (length(i) >= length(longest)) continue;  // shorter ones: each leaves while the long one runs
    later.push_back(service.submit(ServiceJob{{lines[i], ""}, options}));  // a blank line too
    later_lines.push_back(i);
  }
  ASSERT_EQ(later.size(), 6u) << "the fixture's translations";
  for (size_t j = 0; j < later.size(); ++j) {
    const size_t line = later_lines[j];
    auto result = later[j].get();
    ASSERT_EQ(result.translations.size(), 2u) << line;
    EXPECT_EQ(result.translations[0].texts, expected[line][0].texts) << "sentence " << line;
    ASSERT_EQ(result.translations[0].hypotheses.size(), 1u);
    EXPECT_EQ(result.translations[0].hypotheses[0].tokens, expected[line][0].hypotheses[0].tokens) << line;
    EXPECT_NEAR(result.translations[0].hypotheses[0].score, expected[line][0].hypotheses[0].score, 1e-4) << line;
    EXPECT_EQ(result.translations[1].texts, std::vector<std::string>{""});
  }
  EXPECT_EQ(first.get().translations[0].texts, expected[longest][0].texts);
  EXPECT_GT(metrics.joins(), 0) << "shorter requests joined the running batch";
  EXPECT_EQ(metrics.batches(), 0);
}

// A job its caller has abandoned (a request past its deadline) leaves the queue unanswered; the
// others are translated as ever.
TEST(TranslationService, AbandonedJobsLeaveTheQueue) {
  auto translator = random_translator();
  auto lines = read_lines(test::sample_de());
  TranslationOptions options;
  const std::string expected = translator.translate_text({lines[0]}, options).front();
  for (bool continuous : {true, false}) {
    SCOPED_TRACE(continuous ? "in-flight batching" : "whole batches");
    ServiceOptions service_options;
    service_options.workers = 1;
    service_options.max_wait_ms = 300;  // both are queued (and the first abandoned) before the worker takes any
    service_options.continuous = continuous;
    TranslationService service(translator, service_options);
    auto flag = std::make_shared<std::atomic<bool>>(false);
    ServiceJob gone{{lines[1], lines[2]}, options};
    gone.abandoned = flag;
    auto abandoned = service.submit(std::move(gone));
    auto kept = service.submit(ServiceJob{{lines[0]}, options});
    *flag = true;
    EXPECT_THROW(abandoned.get(), ServiceBusy);
    EXPECT_EQ(kept.get().translations.at(0).texts.front(), expected);
  }
}

// A whole batch (beam search) whose requests have all been abandoned while it runs stops at its
// next step instead of running to its end; the worker then serves the next request.
TEST(TranslationService, AnAbandonedRunningBatchStopsAtItsNextStep) {
  auto translator = random_translator();
  auto lines = read_lines(test::sample_de());
  lines.resize(16);
  TranslationOptions options;
  options.search.beam_size = 2;
  const std::string expected = translator.translate_text({lines[0]}, options).front();
  std::vector<std::string> many;  // several seconds of beam search on one worker
  while (many.size() < 512) many.insert(many.end(), lines.begin(), lines.end());
  TranslationOptions wide = options;
  wide.search.beam_size = 8;
  wide.search.max_len_a = 0;
  wide.search.max_len_b = 1000;  // the model's 63 steps: a random model seldom ends sooner
  ServiceOptions service_options;
  service_options.workers = 1;
  service_options.max_wait_ms = 0;
  service_options.max_batch_tokens = 1 << 20;
  service_options.continuous = false;
  TranslationService service(translator, service_options);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  ServiceJob gone{many, wide};
  gone.abandoned = flag;
  auto running = service.submit(std::move(gone));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the idle worker took it at once
  *flag = true;
  EXPECT_THROW(running.get(), SearchStopped);
  EXPECT_EQ(service.submit(ServiceJob{{lines[0]}, options}).get().translations.at(0).texts.front(), expected);
}

// Constrained requests, greedy or beam, with in-flight batching or without: each answer holds
// its phrases and equals translate()'s for that line alone; unconstrained ones are untouched.
TEST(TranslationService, ConstrainedRequestsGetTheirPhrases) {
  auto translator = random_translator();
  auto lines = read_lines(test::sample_de());
  lines.resize(6);
  for (int64_t beam : {1, 3})
    for (bool continuous : {true, false}) {
      SCOPED_TRACE("beam " + std::to_string(beam) + (continuous ? ", in-flight batching" : ", whole batches"));
      TranslationOptions options;
      options.search.beam_size = beam;
      ServiceOptions service_options;
      service_options.max_wait_ms = 100;
      service_options.continuous = continuous;
      TranslationService service(translator, service_options);
      std::vector<std::future<ServiceResult>> answers;
      std::vector<std::vector<std::string>> asked;
      for (size_t i = 0; i < lines.size(); ++i) {
        ServiceJob job{{lines[i]}, options};
        asked.push_back(i % 2 == 0 ? std::vector<std::string>{"Zyxquorbl"} : std::vector<std::string>{});
        if (!asked.back().empty()) job.constraints = {asked.back()};
        answers.push_back(service.submit(std::move(job)));
      }
      for (size_t i = 0; i < lines.size(); ++i) {
        auto result = answers[i].get();
        ASSERT_EQ(result.translations.size(), 1u);
        LineSteering steering;
        steering.constraints = asked[i];
        const auto alone = translator.translate({lines[i]}, options, {}, {steering});
        EXPECT_EQ(result.translations[0].texts, alone[0].texts) << "sentence " << i;
        if (!asked[i].empty()) {
          EXPECT_NE(result.translations[0].texts[0].find("Zyxquorbl"), std::string::npos) << "sentence " << i;
        }
      }
    }
}

// The budget splits the queue into batches; different searches never share one; stop()
// answers everything queued before it returns.
TEST(TranslationService, BudgetSearchesAndStop) {
  auto translator = random_translator();
  auto lines = read_lines(test::sample_de());
  lines.resize(12);
  ServiceMetrics metrics;
  ServiceOptions service_options;
  service_options.max_wait_ms = 50;
  service_options.max_batch_tokens = 1;  // every request alone
  TranslationService service(translator, service_options, &metrics);
  TranslationOptions greedy, beam;
  beam.search.beam_size = 3;
  beam.search.nbest = 2;
  std::vector<std::future<ServiceResult>> answers;
  for (size_t i = 0; i < lines.size(); ++i) answers.push_back(service.submit(ServiceJob{{lines[i]}, i % 2 ? beam : greedy}));
  service.stop();
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_EQ(answers[i].wait_for(std::chrono::seconds(0)), std::future_status::ready);
    auto result = answers[i].get();
    EXPECT_EQ(result.translations[0].hypotheses.size(), i % 2 ? 2u : 1u);
  }
  // Beam requests are whole batches, each alone under the budget; greedy ones ran in streams.
  EXPECT_EQ(metrics.batches(), static_cast<int64_t>(lines.size() / 2));
  EXPECT_GT(metrics.steps(), 0);
  EXPECT_THROW(service.submit(ServiceJob{{"x"}, greedy}), ServiceBusy);  // after stop()

  ServiceOptions tiny_queue;
  tiny_queue.max_queue_sentences = 2;
  tiny_queue.max_wait_ms = 1000;
  TranslationService busy(translator, tiny_queue);
  auto first = busy.submit(ServiceJob{{"a", "b"}, greedy});
  EXPECT_THROW(busy.submit(ServiceJob{{"c"}, greedy}), ServiceBusy);
  busy.stop();
  EXPECT_EQ(first.get().translations.size(), 2u);
}

TEST(TranslationService, AttentionOfEachSentence) {
  auto translator = random_translator();
  TranslationService service(translator, ServiceOptions{});
  ServiceJob job{{"Guten Morgen!", ""}, TranslationOptions{}};
  job.attention = true;
  auto result = service.submit(job).get();
  ASSERT_EQ(result.attention.size(), 2u);
  const auto& map = result.attention[0];
  ASSERT_TRUE(map.weights.defined());
  EXPECT_EQ(map.weights.size(0), static_cast<int64_t>(map.target_pieces.size()));
  EXPECT_EQ(map.weights.size(1), static_cast<int64_t>(map.source_pieces.size()));
  EXPECT_TRUE(torch::allclose(map.weights.sum(1), torch::ones({map.weights.size(0)}), 1e-4, 1e-4));
  EXPECT_FALSE(result.attention[1].weights.defined());  // the empty line
  job.attention_layer = 7;  // the tiny model has fewer layers
  auto bad = service.submit(job);
  EXPECT_THROW(bad.get(), std::invalid_argument);
}

TEST(TranslationService, AlignmentsOfEachSentence) {
  auto translator = random_translator();
  TranslationService service(translator, ServiceOptions{});
  ServiceJob job{{"Guten Morgen!", "", "Wie geht es dir?"}, TranslationOptions{}};
  job.alignments = true;
  auto result = service.submit(job).get();
  ASSERT_EQ(result.alignments.size(), 3u);
  EXPECT_TRUE(result.alignments[1].empty());
  std::vector<std::vector<int64_t>> targets;
  for (const auto& t : result.translations) targets.push_back(t.hypotheses.empty() ? std::vector<int64_t>{} : t.hypotheses[0].tokens);
  EXPECT_EQ(result.alignments, align_words(translator, job.sentences, targets));
}

TEST(TranslationService, ConfidenceOfEachSentenceAsTranslateRatesIt) {
  auto translator = random_translator();
  TranslationService service(translator, ServiceOptions{});
  ServiceJob job{{"Guten Morgen!", "", "Wie geht es dir?"}, TranslationOptions{}};
  job.confidence = true;
  auto result = service.submit(job).get();
  ASSERT_EQ(result.confidence.size(), 3u);
  EXPECT_TRUE(result.confidence[1].words.empty());  // the empty line
  const auto expected = estimate_confidence(translator, {job.sentences[0], job.sentences[2]},
                                            {result.translations[0].hypotheses[0].tokens,
                                             result.translations[2].hypotheses[0].tokens},
                                            TranslationOptions{}, ConfidenceModel());
  EXPECT_NEAR(result.confidence[0].confidence, expected[0].confidence, 1e-6);
  EXPECT_NEAR(result.confidence[2].confidence, expected[1].confidence, 1e-6);
  ASSERT_EQ(result.confidence[2].words.size(), expected[1].words.size());
  EXPECT_GT(result.confidence[2].words.size(), 0u);
  // Over HTTP's request parsers: /v1 takes it through its table, LibreTranslate as an extension.
  EXPECT_TRUE(parse_v1_request("application/json", R"({"q": "Ja.", "confidence": true})", ApiSettings{}).options.confidence);
  EXPECT_TRUE(parse_libretranslate_request("application/json", R"({"q": "Ja.", "source": "de", "target": "en", "confidence": true})",
                                           ApiSettings{}).options.confidence);
  EXPECT_THROW(parse_libretranslate_request("application/json", R"({"q": "Ja.", "confidence": 3})", ApiSettings{}), ApiError);
}

// Reranked jobs get what translate_rescored gives; plain jobs beside them stay plain (they never
// share a batch); a weight without a reverse model or a beam is refused.
TEST(TranslationService, RerankedJobsAsTranslateRescored) {
  auto translator = random_translator();
  TranslationService service(translator, ServiceOptions{});
  const std::vector<std::string> lines = {"Guten Morgen!", "", "Wie geht es dir?"};
  TranslationOptions options;
  options.search.beam_size = 3;
  options.search.nbest = 2;
  options.search.scores = true;
  ServiceJob reranked{lines, options};
  reranked.reverse_weight = 0.5;
  reranked.reverse = &translator;
  auto first = service.submit(reranked);
  auto second = service.submit(ServiceJob{lines, options});
  const auto got = first.get().translations, plain = second.get().translations;
  const auto want = translate_rescored(translator, translator, 0.5, lines, options);
  const auto want_plain = translator.translate(lines, options);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].texts, want[i].texts);
    EXPECT_EQ(plain[i].texts, want_plain[i].texts);
    ASSERT_EQ(got[i].hypotheses.size(), want[i].hypotheses.size());
    for (size_t j = 0; j < got[i].hypotheses.size(); ++j) {
      EXPECT_NEAR(got[i].hypotheses[j].score, want[i].hypotheses[j].score, 1e-5);
      EXPECT_NEAR(plain[i].hypotheses[j].score, want_plain[i].hypotheses[j].score, 1e-5);
      EXPECT_GT(std::abs(got[i].hypotheses[j].score - plain[i].hypotheses[j].score), 1e-3);
    }
  }
  reranked.reverse = nullptr;
  EXPECT_THROW(service.submit(reranked), std::invalid_argument);
  reranked.reverse = &translator;
  reranked.options.search.beam_size = reranked.options.search.nbest = 1;
  EXPECT_THROW(service.submit(reranked), std::invalid_argument);
}

// The binary end to end (HTTP, both APIs against `torchmt translate`, concurrency, caps,
// malformed bodies, SIGTERM with requests in flight), from Python's standard library.
TEST(ServeCommand, EndToEndOverHttp) {
  if (!HttpServer::available()) GTEST_SKIP() << "built without cpp-httplib";
  auto r = test::run_command(test::python() + " " + test::source_dir() + "/tests/serve_test.py " +
                             test::torchmt_binary() + " " + test::tiny_checkpoint() + " " + test::sample_de());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Two models that record their languages (de->en, en->de: random tiny ones of different seeds,
// with an identifier learned from the sample), served by one server started without language
// flags: routing, "auto", /detect, API keys and limits; and a third trained on both directions
// (--both-directions), which alone serves both pairs (tests/serve_languages_test.py).
TEST(ServeCommand, BothDirectionsDetectionAndOperatorControls) {
  if (!HttpServer::available()) GTEST_SKIP() << "built without cpp-httplib";
  test::TempDir dir;
  LanguageIdentifier identifier;
  identifier.learn("de", read_lines(test::sample_de()));
  identifier.learn("en", read_lines(test::sample_en()));
  auto save = [&](const std::string& name, const std::string& source, const std::string& target, int seed,
                  bool both_directions = false) {
    ModelConfig c = ModelConfig::preset("tiny");
    c.src_vocab_size = c.tgt_vocab_size = test::sample_tokenizer().vocab_size();
    c.max_positions = 64;
    torch::manual_seed(seed);
    Transformer model(c);
    CheckpointMeta meta;
    meta.model = c;
    meta.src_spm_model = meta.tgt_spm_model = test::sample_tokenizer().serialized();
    meta.src_spm_checksum = meta.tgt_spm_checksum = test::sample_tokenizer().checksum();
    meta.source_language = source;
    meta.target_language = target;
    meta.language_identifier = identifier.serialize();
    meta.both_directions = both_directions;
    save_checkpoint(dir.file(name), model, nullptr, meta);
    return dir.file(name);
  };
  const std::string deen = save("deen.pt", "de", "en", 5), ende = save("ende.pt", "en", "de", 6),
                    both = save("both.pt", "de", "en", 7, true);
  EXPECT_TRUE(load_checkpoint(both, torch::kCPU).meta.both_directions);
  EXPECT_FALSE(load_checkpoint(deen, torch::kCPU).meta.both_directions);
  auto r = test::run_command(test::torchmt_binary() + " languages -m " + both);
  EXPECT_NE(r.output.find("both directions\tyes"), std::string::npos) << r.output;
  r = test::run_command(test::torchmt_binary() + " export -m " + both + " -o " + dir.file("both.ts"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(load_translator(dir.file("both.ts"), torch::kCPU, torch::kFloat).languages().both_directions);
  EXPECT_FALSE(load_translator(deen, torch::kCPU, torch::kFloat).languages().both_directions);
  r = test::run_command(test::python() + " " + test::source_dir() + "/tests/serve_languages_test.py " +
                        test::torchmt_binary() + " " + deen + " " + ende + " " + dir.path().string() + " " + both);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// The web page in a real browser: headless Chromium types a sentence and finds the translation
// and the heatmap; the screenshots are kept in test-artifacts/ of the build directory.
TEST(ServeCommand, WebPageInHeadlessChromium) {
  if (!HttpServer::available()) GTEST_SKIP() << "built without cpp-httplib";
  const auto artifacts = (std::filesystem::current_path() / "test-artifacts").string();
  auto r = test::run_command(test::python() + " " + test::source_dir() + "/tests/serve_browser_test.py " +
                             test::torchmt_binary() + " " + test::tiny_checkpoint() + " " + artifacts);
  if (r.exit_code == 77) GTEST_SKIP() << r.output;  // no Chromium / chromedriver / selenium here
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace torchmt
