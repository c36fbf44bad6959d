// Languages: the identifier (learned from text, detecting sentences and snippets, serialized),
// what a run records in its checkpoints and exports, and the server's operator controls (API
// keys, request limits) that guard the LibreTranslate endpoints.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "data_test_support.h"
#include "torchmt/data/language_identifier.h"
#include "data/text_file.h"
#include "io/checkpoint.h"
#include "torchmt/loading/model_loader.h"
#include "serving/access_control.h"
#include "serving/http_api.h"
#include "torchmt/training/trainer.h"

namespace torchmt {
namespace {

const LanguageIdentifier& sample_identifier() {
  static const LanguageIdentifier identifier = [] {
    LanguageIdentifier id;
    id.learn("de", read_lines(test::sample_de()));
    id.learn("en", read_lines(test::sample_en()));
    return id;
  }();
  return identifier;
}

TEST(LanguageIdentifier, TellsGermanFromEnglishInSentencesAndSnippets) {
  const auto& id = sample_identifier();
  EXPECT_EQ(id.languages(), (std::vector<std::string>{"de", "en"}));
  EXPECT_EQ(id.best("Ein Mann fährt mit dem Fahrrad über eine Brücke."), "de");
  EXPECT_EQ(id.best("A woman is walking her dog in the park."), "en");
  EXPECT_EQ(id.best("Zwei Hunde"), "de");
  EXPECT_EQ(id.best("the children"), "en");
  const auto guesses = id.detect("Die Kinder spielen im Schnee.");
  ASSERT_EQ(guesses.size(), 2u);
  EXPECT_EQ(guesses[0].language, "de");
  EXPECT_GT(guesses[0].confidence, 90.0);
  EXPECT_NEAR(guesses[0].confidence + guesses[1].confidence, 100.0, 0.02);
  // Nothing to tell by: every language at 0, never a crash on odd bytes.
  for (const std::string text : {"", "123 !?", "\xff\xfe", "🙂🙂"}) {
    const auto none = id.detect(text);
    ASSERT_EQ(none.size(), 2u) << text;
    EXPECT_EQ(none[0].confidence, 0.0) << text;
  }
  EXPECT_TRUE(LanguageIdentifier().detect("Hallo").empty());
  EXPECT_EQ(LanguageIdentifier().best("Hallo"), "");
}

TEST(LanguageIdentifier, SerializesMergesAndRefusesCorruptBytes) {
  const auto& id = sample_identifier();
  const std::string bytes = id.serialize();
  const LanguageIdentifier back = LanguageIdentifier::deserialize(bytes);
  EXPECT_EQ(back.languages(), id.languages());
  for (const std::string text : {"Ein Hund rennt.", "A dog runs.", "Hallo"}) {
    ASSERT_EQ(back.detect(text).size(), id.detect(text).size());
    EXPECT_EQ(back.detect(text)[0].confidence, id.detect(text)[0].confidence);
  }
  EXPECT_THROW(LanguageIdentifier::deserialize(""), std::runtime_error);
  EXPECT_THROW(LanguageIdentifier::deserialize(bytes.substr(0, bytes.size() - 1)), std::runtime_error);
  EXPECT_THROW(LanguageIdentifier::deserialize(bytes + "x"), std::runtime_error);
  std::string positive = bytes;
  const float one = 1.0f;
  std::memcpy(&positive[positive.size() - 4], &one, 4);  // a probability above 1
  EXPECT_THROW(LanguageIdentifier::deserialize(positive), std::runtime_error);
  // Merging adds the languages the other knows and this one does not.
  LanguageIdentifier de;
  de.learn("de", read_lines(test::sample_de()));
  LanguageIdentifier en_fr;
  en_fr.learn("en", read_lines(test::sample_en()));
  de.merge(en_fr);
  de.merge(id);
  EXPECT_EQ(de.languages(), (std::vector<std::string>{"de", "en"}));
}

TEST(LanguageIdentifier, CodesNamesAndFileSuffixes) {
  EXPECT_EQ(language_name("de"), "German");
  EXPECT_EQ(language_name("en"), "English");
  EXPECT_EQ(language_name("pt-BR"), "Portuguese (BR)");
  EXPECT_EQ(language_name("xx"), "xx");
  EXPECT_EQ(language_of_file_name("/data/train.de.gz"), "de");
  EXPECT_EQ(language_of_file_name("train.en"), "en");
  EXPECT_EQ(language_of_file_name("train.txt"), "");
  EXPECT_EQ(language_of_file_name("corpus"), "");
  EXPECT_NO_THROW(check_language_code("de", "x"));
  EXPECT_NO_THROW(check_language_code("zh-Hans", "x"));
  for (const std::string bad : {"", "D", "DE", "deu1", "de-", "d e", "german"})
    EXPECT_THROW(check_language_code(bad, "--source-language"), std::invalid_argument) << bad;
}

// A run records its languages (from the files' suffixes, or the flags) and an identifier for
// them in every checkpoint, and the loaded translator carries them.
TEST(LanguageIdentifier, TrainingRecordsTheLanguagesInTheCheckpoint) {
  test::TempDir dir;
  const std::string src = dir.file("pairs.de"), tgt = dir.file("pairs.en");
  write_lines(src, read_lines(test::sample_de()));
  write_lines(tgt, read_lines(test::sample_en()));
  TrainOptions o = test::tiny_run(dir.file("run"), src, tgt);
  o.max_steps = 2;
  Trainer(o).run();
  Translator t = load_translator(dir.file("run") + "/checkpoint_last.pt", torch::kCPU, torch::kFloat);
  EXPECT_EQ(t.languages().source, "de");
  EXPECT_EQ(t.languages().target, "en");
  EXPECT_EQ(t.languages().identifier.best("Ein kleines Mädchen klettert."), "de");
  // Flags name what the files do not: sample.de/en say it too, the flags win.
  TrainOptions flagged = test::tiny_run(dir.file("run2"));
  flagged.max_steps = 1;
  flagged.source_language = "gsw";
  flagged.target_language = "en";
  Trainer(flagged).run();
  const auto loaded = load_checkpoint(dir.file("run2") + "/checkpoint_last.pt", torch::kCPU);
  EXPECT_EQ(loaded.meta.source_language, "gsw");
  EXPECT_EQ(checkpoint_languages(loaded.meta).identifier.languages(), (std::vector<std::string>{"gsw", "en"}));
  // A resumed run keeps its checkpoint's identifier instead of learning it again.
  const std::string learned =
      load_checkpoint(dir.file("run") + "/checkpoint_last.pt", torch::kCPU).meta.language_identifier;
  ASSERT_FALSE(learned.empty());
  TrainOptions more = o;
  more.max_steps = 3;
  more.resume = true;
  std::vector<std::string> lines;
  TrainHooks hooks;
  hooks.on_progress = [&](int64_t, const std::string& line) { lines.push_back(line); };
  Trainer(more).run(hooks);
  bool reused = false;
  for (const auto& line : lines) reused = reused || line == "languages: de -> en, identifier from the resumed checkpoint";
  EXPECT_TRUE(reused);
  const auto resumed = load_checkpoint(dir.file("run") + "/checkpoint_last.pt", torch::kCPU).meta;
  EXPECT_EQ(resumed.position.step, 3);
  EXPECT_EQ(resumed.language_identifier, learned);
  TrainOptions bad = test::tiny_run(dir.file("run3"));
  bad.source_language = "German";
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

// A checkpoint from before torchmt recorded languages gets them, and an identifier, without
// training (`torchmt languages -o`); the copy serves /detect.
TEST(LanguageIdentifier, LanguagesCommandGivesAnOldCheckpointItsLanguages) {
  test::TempDir dir;
  const std::string bin = test::torchmt_binary(), old = test::tiny_checkpoint(), out = dir.file("with.pt");
  auto r = test::run_command(bin + " languages -m " + old);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("source\t-"), std::string::npos) << r.output;
  r = test::run_command(bin + " languages -m " + old + " -o " + out + " --source-language de --target-language en --learn de=" +
                        test::sample_de() + " --learn en=" + test::sample_en());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Translator t = load_translator(out, torch::kCPU, torch::kFloat);
  EXPECT_EQ(t.languages().source, "de");
  EXPECT_EQ(t.languages().target, "en");
  EXPECT_EQ(t.languages().identifier.best("Zwei Männer sitzen auf einer Bank."), "de");
  r = test::run_command(bin + " languages -m " + out);
  EXPECT_NE(r.output.find("identifier\tde,en"), std::string::npos) << r.output;
  // The weights are the old checkpoint's.
  const Translator before = load_translator(old, torch::kCPU, torch::kFloat);
  EXPECT_EQ(const_cast<Translator&>(t).translate_text({"Ein Hund."}, {}),
            const_cast<Translator&>(before).translate_text({"Ein Hund."}, {}));
  // Refused in one line: a language not given, a bad code, a missing text file, a language
  // learned twice or from a file with no text, -o onto itself.
  test::write_text(dir.file("empty.txt"), "\n \n");
  for (const auto& [args, want] : std::vector<std::pair<std::string, int>>{
           {" -o " + dir.file("x.pt") + " --source-language de --target-language en --learn de=" + test::sample_de() +
                " --learn de=" + test::sample_en(), 2},
           {" -o " + dir.file("x.pt") + " --source-language de --target-language en --learn de=" + dir.file("empty.txt") +
                " --learn en=" + test::sample_en(), 1},
           {" -o " + dir.file("x.pt"), 2},
           {" -o " + dir.file("x.pt") + " --source-language German --target-language en", 2},
           {" -o " + dir.file("x.pt") + " --source-language de --target-language en --learn fr=" + test::sample_de(), 2},
           {" -o " + dir.file("x.pt") + " --source-language de --target-language en --learn de=/nonexistent", 1},
           {" -o " + old + " --source-language de --target-language en", 2},
           {" --source-language de", 2}}) {
    r = test::run_command(bin + " languages -m " + old + args);
    EXPECT_EQ(r.exit_code, want) << args << ": " << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.pt")));
}

TEST(AccessControl, ApiKeysFileAndConstantTimeLookup) {
  const ApiKeys keys = ApiKeys::parse("# operator keys\nabcdefgh1234\nlimited-key-0001 30  # half a request a second\n"
                                      "small-key-000002 5 100\n",
                                      "keys.txt");
  EXPECT_EQ(keys.size(), 3u);
  ASSERT_TRUE(keys.find("limited-key-0001"));
  EXPECT_EQ(keys.find("limited-key-0001")->requests_per_minute, 30);
  EXPECT_EQ(keys.find("small-key-000002")->char_limit, 100);
  EXPECT_EQ(keys.find("abcdefgh1234")->requests_per_minute, -1);
  EXPECT_FALSE(keys.find("abcdefgh123"));
  EXPECT_FALSE(keys.find("abcdefgh12345"));
  EXPECT_FALSE(keys.find(""));
  for (const std::string bad : {"", "# nothing\n", "short\n", "abcdefgh1234 0\n", "abcdefgh1234 x\n",
                                "abcdefgh1234 1 2 3\n", "abcdefgh1234\nabcdefgh1234\n", "abcdefgh\xff\n"})
    EXPECT_THROW(ApiKeys::parse(bad, "keys.txt"), std::runtime_error) << bad;
  EXPECT_THROW(ApiKeys::load("/nonexistent/keys.txt"), std::runtime_error);
}

TEST(AccessControl, RequestLimitHoldsUnderSixteenThreads) {
  RequestLimiter limiter;
  const auto now = RequestLimiter::Clock::now();
  std::atomic<int> passed{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) (limiter.take("address 10.0.0.1", 60, now) == 0 ? passed : refused)++;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 60);  // the bucket's 60, not one more, at one instant
  EXPECT_EQ(refused.load(), 100);
  EXPECT_EQ(limiter.take("address 10.0.0.1", 60, now), 1);  // one request a second refills
  EXPECT_EQ(limiter.take("address 10.0.0.1", 60, now + std::chrono::seconds(1)), 0);
  EXPECT_EQ(limiter.take("address 10.0.0.2", 60, now), 0);  // another client has its own
  EXPECT_EQ(limiter.take("key k", 2, now), 0);
  EXPECT_EQ(limiter.take("key k", 2, now), 0);
  EXPECT_EQ(limiter.take("key k", 2, now), 30);  // Retry-After: 2 a minute = one every 30 s
}

ApiSettings two_directions() {
  ApiSettings s;
  s.pairs = {{"de", "en"}, {"en", "de"}};
  auto id = std::make_shared<LanguageIdentifier>(sample_identifier());
  s.identifier = id;
  return s;
}

int status_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const ApiError& e) {
    if (message) *message = e.what();
    return e.status();
  }
  return 0;
}

TEST(LibreTranslateApi, RequestsAreCheckedWithLibreTranslatesMessages) {
  const auto s = two_directions();
  auto read = [&](const std::string& body, std::string* message = nullptr, ApiSettings settings = {}) {
    if (settings.pairs.empty()) settings = s;
    return status_of([&] { read_libretranslate_request("application/json", body, settings); }, message);
  };
  std::string m;
  EXPECT_EQ(read(R"({"source": "de", "target": "en"})", &m), 400);
  EXPECT_EQ(m, "Invalid request: missing q parameter");
  EXPECT_EQ(read(R"({"q": "", "source": "de", "target": "en"})", &m), 400);
  EXPECT_EQ(m, "Invalid request: missing q parameter");
  EXPECT_EQ(read(R"({"q": "a", "source": "auto"})", &m), 400);  // two targets: which one?
  EXPECT_EQ(m, "Invalid request: missing target parameter");
  EXPECT_EQ(read(R"({"q": "a", "source": "de"})"), 0);  // de has one target
  EXPECT_EQ(read(R"({"q": "a", "source": "de", "target": "zz"})", &m), 400);
  EXPECT_EQ(m, "zz is not supported");
  EXPECT_EQ(read(R"({"q": "a", "source": "fr", "target": "en"})", &m), 400);
  EXPECT_EQ(m, "fr is not supported");
  EXPECT_EQ(read(R"({"q": "a", "source": "de", "target": "en", "format": "xml"})", &m), 400);
  EXPECT_EQ(m, "xml format is not supported");
  EXPECT_EQ(read(R"({"q": "a", "source": "de", "target": "en", "alternatives": "x"})", &m), 400);
  EXPECT_EQ(m, "Invalid request: alternatives parameter is not a number");
  ApiSettings limited = s;
  limited.char_limit = 5;
  limited.batch_limit = 2;
  EXPECT_EQ(read(R"({"q": "abcdef", "source": "de", "target": "en"})", &m, limited), 400);
  EXPECT_EQ(m, "Invalid request: request (6) exceeds text limit (5)");
  EXPECT_EQ(read(R"({"q": "äöüäö", "source": "de", "target": "en"})", &m, limited), 0);  // characters, not bytes
  EXPECT_EQ(read(R"({"q": ["a", "b", "c"], "source": "de", "target": "en"})", &m, limited), 400);
  EXPECT_EQ(m, "Invalid request: request (3) exceeds text limit (2)");
  // Routing: the pair's model, or LibreTranslate's message for a pair nobody serves.
  EXPECT_EQ(libretranslate_route(s, "de", "en"), 0u);
  EXPECT_EQ(libretranslate_route(s, "en", "de"), 1u);
  EXPECT_EQ(status_of([&] { libretranslate_route(s, "de", "de"); }, &m), 400);
  EXPECT_EQ(m, "German (de) is not available as a target language from German (de)");
  RequestOptions v1;
  EXPECT_EQ(status_of([&] { v1_route(s, v1); }), 400);  // two directions: say which
  v1.source = "en";
  EXPECT_EQ(v1_route(s, v1), 1u);
  v1.source = "fr";
  EXPECT_EQ(status_of([&] { v1_route(s, v1); }), 400);
  EXPECT_EQ(request_api_key("application/x-www-form-urlencoded", "q=a&api_key=k%2B1"), "k+1");
  EXPECT_EQ(request_api_key("application/json", "{not json"), "");
  EXPECT_EQ(parse_detect_request("application/json", R"({"q": ["a", "b"]})").texts.size(), 2u);
  EXPECT_EQ(status_of([&] { parse_detect_request("application/json", "{}"); }), 400);
}

}  // namespace
}  // namespace torchmt
