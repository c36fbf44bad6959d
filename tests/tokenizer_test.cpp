// SentencePiece BPE training and the Tokenizer: fixed special ids, determinism, round trips,
// .gz input, clear errors, and the `torchmt vocab` command.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "data_test_support.h"
#include "test_support.h"
#include "torchmt/data/special_ids.h"
#include "data/text_file.h"
#include "torchmt/data/tokenizer.h"
#include "util/stop_signals.h"

namespace torchmt {
namespace {

using test::sample_de;
using test::sample_en;
using test::sample_tokenizer;
using test::TempDir;

std::string train(const TempDir& dir, const std::string& name, std::vector<std::string> inputs, uint32_t seed = 1,
                  int64_t input_sentence_size = 2000000) {
  VocabTrainingOptions o;
  o.inputs = std::move(inputs);
  o.model_prefix = dir.file(name);
  o.vocab_size = test::kSampleVocabSize;
  o.seed = seed;
  o.input_sentence_size = input_sentence_size;
  train_bpe_vocab(o);
  return o.model_prefix + ".model";
}

TEST(Tokenizer, SpecialIdsAreFixed) {
  EXPECT_EQ(kPadId, 0);
  EXPECT_EQ(kUnkId, 1);
  EXPECT_EQ(kBosId, 2);
  EXPECT_EQ(kEosId, 3);
  const Tokenizer& tok = sample_tokenizer();
  EXPECT_EQ(tok.vocab_size(), test::kSampleVocabSize);
  EXPECT_EQ(tok.id_to_piece(kPadId), "<pad>");
  EXPECT_EQ(tok.id_to_piece(kUnkId), "<unk>");
  EXPECT_EQ(tok.id_to_piece(kBosId), "<s>");
  EXPECT_EQ(tok.id_to_piece(kEosId), "</s>");
}

TEST(Tokenizer, RoundTripsGermanText) {
  const Tokenizer& tok = sample_tokenizer();
  for (const std::string s : {
           "Die Straße heißt Schloßallee.",
           "Übermorgen öffnen wir um 9:15 Uhr, größer als 2.962 Meter!",
           "Er fragte: „Kommst du mit?“",
           "Äpfel, Birnen und Pflaumen – 12,50 Euro.",
           "Do you have anything cheaper? 030 1234567",
       }) {
    auto ids = tok.encode(s);
    ASSERT_FALSE(ids.empty());
    for (int64_t id : ids) {
      EXPECT_GT(id, kEosId) << s;  // no specials, no unknowns: every character is in the sample
      EXPECT_LT(id, tok.vocab_size());
    }
    EXPECT_EQ(tok.decode(ids), s);
    auto pieces = tok.encode_pieces(s);
    ASSERT_EQ(pieces.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok.id_to_piece(ids[i]), pieces[i]);
  }
}

TEST(Tokenizer, DecodeSkipsPadBosEos) {
  const Tokenizer& tok = sample_tokenizer();
  auto ids = tok.encode("Guten Morgen!");
  std::vector<int64_t> framed = {kBosId};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.insert(framed.end(), {kEosId, kPadId, kPadId});
  EXPECT_EQ(tok.decode(framed), "Guten Morgen!");
}

TEST(Tokenizer, TrainingIsDeterministicAndLocationIndependent) {
  TempDir a, b;
  Tokenizer first = Tokenizer::load(train(a, "x", {sample_de(), sample_en()}));
  Tokenizer second = Tokenizer::load(train(b, "elsewhere", {sample_de(), sample_en()}));
  EXPECT_EQ(first.serialized(), second.serialized());
  EXPECT_EQ(first.checksum(), second.checksum());
  EXPECT_EQ(first.checksum().size(), 16u);
  EXPECT_EQ(test::read_text(a.file("x.vocab")), test::read_text(b.file("elsewhere.vocab")));
  // Sampling fewer sentences than the input has: still a function of the seed.
  Tokenizer s1 = Tokenizer::load(train(a, "s1", {sample_de(), sample_en()}, 7, 300));
  Tokenizer s2 = Tokenizer::load(train(b, "s2", {sample_de(), sample_en()}, 7, 300));
  EXPECT_EQ(s1.checksum(), s2.checksum());
}

TEST(Tokenizer, GzipInputTrainsTheSameModel) {
  TempDir dir;
  write_lines(dir.file("de.gz"), read_lines(sample_de()));
  write_lines(dir.file("en.gz"), read_lines(sample_en()));
  Tokenizer plain = Tokenizer::load(train(dir, "plain", {sample_de(), sample_en()}));
  Tokenizer gz = Tokenizer::load(train(dir, "gz", {dir.file("de.gz"), dir.file("en.gz")}));
  EXPECT_EQ(plain.checksum(), gz.checksum());
}

TEST(Tokenizer, SerializedModelLoadsAgain) {
  const Tokenizer& tok = sample_tokenizer();
  Tokenizer copy = Tokenizer::from_serialized(tok.serialized());
  EXPECT_EQ(copy.checksum(), tok.checksum());
  EXPECT_EQ(copy.encode("Wie spät ist es?"), tok.encode("Wie spät ist es?"));
}

TEST(Tokenizer, MissingOrCorruptModelIsAClearError) {
  TempDir dir;
  try {
    Tokenizer::load(dir.file("nope.model"));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.model"), std::string::npos) << e.what();
  }
  test::write_text(dir.file("junk.model"), "this is not a protobuf \xff\xfe");
  try {
    Tokenizer::load(dir.file("junk.model"));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("junk.model"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::from_serialized("garbage"), std::runtime_error);
}

// A model cut where one of its fields ends parses (fewer pieces, no normaliser) and would encode
// differently without a word: load refuses it.
TEST(Tokenizer, AModelCutWhereAFieldEndsIsRefused) {
  const std::string whole = sample_tokenizer().serialized();
  const auto ends = test::spm_field_ends(whole);
  ASSERT_EQ(ends.back(), whole.size());
  ASSERT_EQ(ends.size(), static_cast<size_t>(test::kSampleVocabSize) + 2);  // the pieces, trainer_spec, normalizer_spec
  TempDir dir;
  test::write_text(dir.file("whole.model"), whole);
  EXPECT_EQ(Tokenizer::load(dir.file("whole.model")).checksum(), sample_tokenizer().checksum());
  const std::vector<std::pair<size_t, std::string>> cuts = {
      {ends[test::kSampleVocabSize / 2], "trainer_spec"},  // half the pieces
      {ends[test::kSampleVocabSize], "normalizer_spec"},   // the pieces and trainer_spec
  };
  for (const auto& [cut, needle] : cuts) {
    test::write_text(dir.file("cut.model"), whole.substr(0, cut));
    EXPECT_NO_THROW(Tokenizer::from_serialized(whole.substr(0, cut)));  // SentencePiece takes it
    try {
      Tokenizer::load(dir.file("cut.model"));
      ADD_FAILURE() << "loaded a model cut at byte " << cut;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.model' is incomplete"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Tokenizer, TrainingOnAMissingFileNamesIt) {
  TempDir dir;
  try {
    train(dir, "m", {sample_de(), dir.file("absent.en")});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.en"), std::string::npos) << e.what();
  }
}

// With a stop predicate the training runs in a child process: the same model byte for byte, the
// child's errors as this process's, and a stop ends it while SentencePiece learns its pieces
// (which it cannot interrupt), with nothing written.
TEST(Tokenizer, TrainingInAChildProcessGivesTheSameModelAndStops) {
  TempDir dir;
  const std::string here = train(dir, "here", {sample_de(), sample_en()});
  VocabTrainingOptions o;
  o.inputs = {sample_de(), sample_en()};
  o.model_prefix = dir.file("child");
  o.vocab_size = test::kSampleVocabSize;
  o.stop_requested = [] { return false; };
  train_bpe_vocab(o);
  EXPECT_EQ(test::read_text(o.model_prefix + ".model"), test::read_text(here));

  // A corpus whose pieces take seconds to learn: 60,000 lines of made-up words.
  std::string text;
  uint64_t x = 88172645463325252ull;
  for (int line = 0; line < 60000; ++line) {
    for (int word = 0; word < 12; ++word) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      for (uint64_t n = 3 + x % 8, y = x; n > 0; --n, y /= 26) text += static_cast<char>('a' + y % 26);
      text += ' ';
    }
    text += '\n';
  }
  test::write_text(dir.file("words.txt"), text);
  VocabTrainingOptions slow = o;
  slow.inputs = {dir.file("words.txt")};
  slow.model_prefix = dir.file("slow");
  slow.vocab_size = 8000;
  bool read_all = false;
  slow.lines_read = [&read_all](int64_t, bool done) { read_all = read_all || done; };  // in the child: stays false here
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  slow.stop_requested = [&] { return elapsed() > 1.0; };
  EXPECT_THROW(train_bpe_vocab(slow), StopRequested);
  EXPECT_LT(elapsed(), 1.6);
  EXPECT_FALSE(read_all);
  EXPECT_FALSE(std::filesystem::exists(slow.model_prefix + ".model"));
  EXPECT_FALSE(std::filesystem::exists(slow.model_prefix + ".vocab"));

  // What the child throws comes back: a corrupt .gz, named.
  test::write_text(dir.file("broken.gz"), std::string("\x1f\x8b\x08\x00 not gzip at all", 20));
  VocabTrainingOptions broken = o;
  broken.inputs = {dir.file("broken.gz")};
  broken.model_prefix = dir.file("broken");
  try {
    train_bpe_vocab(broken);
    FAIL() << "a corrupt .gz trained a vocabulary";
  } catch (const StopRequested&) {
    FAIL() << "an error came back as a stop";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.gz"), std::string::npos) << e.what();
  }
}

TEST(VocabCommand, TrainsJointAndSeparateModels) {
  TempDir dir;
  const std::string base = test::torchmt_binary() + " vocab --src " + sample_de() + " --tgt " + sample_en() +
                           " --vocab-size 300 --out " + dir.file("spm/deen");
  auto joint = test::run_command(base);
  ASSERT_EQ(joint.exit_code, 0) << joint.output;
  Tokenizer tok = Tokenizer::load(dir.file("spm/deen.model"));
  EXPECT_EQ(tok.vocab_size(), 300);
  EXPECT_FALSE(test::read_text(dir.file("spm/deen.vocab")).empty());

  auto separate = test::run_command(base + " --separate");
  ASSERT_EQ(separate.exit_code, 0) << separate.output;
  Tokenizer src = Tokenizer::load(dir.file("spm/deen.src.model"));
  Tokenizer tgt = Tokenizer::load(dir.file("spm/deen.tgt.model"));
  EXPECT_NE(src.checksum(), tgt.checksum());
  EXPECT_EQ(tgt.id_to_piece(kEosId), "</s>");
}

TEST(VocabCommand, ReportsBadFlagsAndMissingFiles) {
  TempDir dir;
  auto no_out = test::run_command(test::torchmt_binary() + " vocab --src a --tgt b");
  EXPECT_EQ(no_out.exit_code, 2) << no_out.output;
  auto bad_size = test::run_command(test::torchmt_binary() + " vocab --src a --tgt b --out x --vocab-size 3");
  EXPECT_EQ(bad_size.exit_code, 2) << bad_size.output;
  auto missing = test::run_command(test::torchmt_binary() + " vocab --src " + dir.file("gone.de") + " --tgt " +
                                   sample_en() + " --out " + dir.file("m"));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("gone.de"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace torchmt
