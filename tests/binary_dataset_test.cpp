// The binary dataset: what `preprocess` writes equals the in-memory encoding; an incomplete,
// truncated or bit-flipped dataset is refused by name; the run cache reuses and rebuilds; and
// training reads a dataset, or several corpora mixed by weight, end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "data_test_support.h"
#include "test_support.h"
#include "data/binary_dataset.h"
#include "data/text_file.h"
#include "io/checkpoint.h"
#include "util/atomic_file.h"
#include "util/stop_signals.h"
#include "torchmt/training/trainer.h"
#include "training/training_corpora.h"
#include "util/integrity.h"

namespace torchmt {
namespace {

namespace fs = std::filesystem;
using test::sample_tokenizer;
using test::error_of;
using test::TempDir;

std::vector<int64_t> ids_of(const PairSource& s, int64_t i, bool src) {
  std::vector<int64_t> out(static_cast<size_t>(src ? s.src_length(i) : s.tgt_length(i)));
  if (src)
    s.copy_src(i, out.data());
  else
    s.copy_tgt(i, out.data());
  return out;
}

void expect_same_pairs(const PairSource& a, const PairSource& b) {
  ASSERT_EQ(a.size(), b.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(ids_of(a, i, true), ids_of(b, i, true)) << "pair " << i;
    ASSERT_EQ(ids_of(a, i, false), ids_of(b, i, false)) << "pair " << i;
    ASSERT_EQ(a.line(i), b.line(i)) << "pair " << i;
  }
}

// Validation on the sample's first `lines` pairs (the run's end validates and writes metrics.csv).
void validate_on_the_sample(TrainOptions& o, const TempDir& dir, size_t lines) {
  auto de = read_lines(test::sample_de()), en = read_lines(test::sample_en());
  de.resize(lines);
  en.resize(lines);
  write_lines(dir.file("v.de"), de);
  write_lines(dir.file("v.en"), en);
  o.valid_src = dir.file("v.de");
  o.valid_tgt = dir.file("v.en");
  o.valid_batch_size = 64;
}

// The sample with a few pairs that must be skipped, so the line numbers are tested too.
void write_corpus(const TempDir& dir) {
  auto de = read_lines(test::sample_de()), en = read_lines(test::sample_en());
  de[3] = "";
  en[7] = "Stra\xdf" "e";
  write_lines(dir.file("c.de"), de);
  write_lines(dir.file("c.en"), en);
}

TEST(BinaryDataset, EqualsTheInMemoryEncodingAtAnyChunkSize) {
  TempDir dir;
  write_corpus(dir);
  const Tokenizer& tok = sample_tokenizer();
  const EncodedCorpus memory = load_parallel_corpus(dir.file("c.de"), dir.file("c.en"), tok, tok, {});
  EXPECT_EQ(memory.stats.empty, 1);
  EXPECT_EQ(memory.stats.invalid_utf8, 1);
  for (int64_t chunk : {int64_t{7}, int64_t{1} << 16}) {
    PreprocessOptions options;
    options.chunk_pairs = chunk;
    options.corpus.num_threads = 2;
    int64_t counted = 0, done = 0;
    options.lines_counted = [&](int64_t n) { counted = n; };
    options.lines_done = [&](int64_t n) { done += n; };
    const std::string out = dir.file("d" + std::to_string(chunk));
    const DatasetManifest m = preprocess_corpus(dir.file("c.de"), dir.file("c.en"), tok, out, options);
    EXPECT_EQ(counted, memory.stats.total);
    EXPECT_EQ(done, memory.stats.total);
    EXPECT_EQ(m.stats.summary(), memory.stats.summary());
    EXPECT_EQ(m.token_bytes, 2);  // the sample's vocabulary fits uint16
    EXPECT_FALSE(fs::exists(out + ".partial"));
    auto d = BinaryDataset::open(out);
    expect_same_pairs(*d, memory);
    EXPECT_EQ(Tokenizer::load(d->tokenizer_path()).checksum(), tok.checksum());
    d->release_pages();
    expect_same_pairs(*d, memory);  // pages come back after release
  }
}

TEST(BinaryDataset, IncompleteTruncatedOrFlippedIsRefusedByName) {
  TempDir dir;
  write_corpus(dir);
  const Tokenizer& tok = sample_tokenizer();
  const std::string out = dir.file("d");
  preprocess_corpus(dir.file("c.de"), dir.file("c.en"), tok, out, {});
  // The dataset's files as written, put back after each damage (by bytes: CUDA LibTorch's
  // libtorch.so exports copies of fs::copy / fs::remove_all that crash when called from here).
  std::map<std::string, std::string> pristine;
  for (const auto& entry : fs::directory_iterator(out)) pristine[entry.path().string()] = test::read_text(entry.path().string());
  ASSERT_GE(pristine.size(), 6u);
  auto restore = [&] {
    for (const auto& [path, bytes] : pristine) test::write_text(path, bytes);
  };
  for (const std::string name : {"src.tokens", "tgt.tokens", "offsets.bin", "lengths.bin", "lines.bin", "spm.model"}) {
    const std::string path = out + "/" + name;
    std::string bytes = test::read_text(path);
    test::write_text(path, bytes.substr(0, bytes.size() - 2));
    std::string e = error_of([&] { BinaryDataset::open(out); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find("damaged"), std::string::npos) << e;
    bytes[bytes.size() / 2] ^= 0x10;
    test::write_text(path, bytes);
    e = error_of([&] { BinaryDataset::open(out); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
    EXPECT_THROW(BinaryDataset::open(out), DamagedFileError);
    restore();
  }
  fs::remove(out + "/manifest.json");  // what a kill before the last step leaves
  const std::string e = error_of([&] { BinaryDataset::open(out); });
  EXPECT_NE(e.find("incomplete"), std::string::npos) << e;
  restore();
  // The manifest itself is checked too: 4 KB of NUL bytes after it (a torn write) is damage.
  {
    const std::string manifest = read_file(out + "/manifest.json");
    test::write_text(out + "/manifest.json", manifest + std::string(4096, '\0'));
    const std::string nul = error_of([&] { BinaryDataset::open(out); });
    EXPECT_NE(nul.find("NUL bytes"), std::string::npos) << nul;
    test::write_text(out + "/manifest.json", manifest);
    EXPECT_NO_THROW(BinaryDataset::open(out));
  }
  test::write_text(out + "/manifest.json", "{\"format\": \"torchmt-dataset\", \"version\": 1, \"pairs\": 5");
  EXPECT_THROW(BinaryDataset::open(out), DamagedFileError);
  EXPECT_THROW(BinaryDataset::open(dir.file("nowhere")), std::runtime_error);
}

TEST(BinaryDataset, PreprocessRefusesMisalignedFilesAndExistingOutput) {
  TempDir dir;
  write_corpus(dir);
  test::write_text(dir.file("short.en"), "one\n");
  const Tokenizer& tok = sample_tokenizer();
  const std::string e = error_of([&] { preprocess_corpus(dir.file("c.de"), dir.file("short.en"), tok, dir.file("x"), {}); });
  EXPECT_NE(e.find("c.de"), std::string::npos) << e;
  EXPECT_NE(e.find("short.en"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.file("x")));
  EXPECT_FALSE(fs::exists(dir.file("x.partial")));
  // A crashed run's leftovers are replaced; a finished dataset is never overwritten.
  fs::create_directories(dir.file("y.partial"));
  test::write_text(dir.file("y.partial/src.tokens"), "junk");
  preprocess_corpus(dir.file("c.de"), dir.file("c.en"), tok, dir.file("y"), {});
  EXPECT_NO_THROW(BinaryDataset::open(dir.file("y")));
  EXPECT_NE(error_of([&] { preprocess_corpus(dir.file("c.de"), dir.file("c.en"), tok, dir.file("y"), {}); })
                .find("already exists"),
            std::string::npos);
}

// A line far past any length limit (50 MB, no newline at the end of the file) is skipped and
// counted as too long: read in bounded memory, never encoded (it ended in std::bad_alloc under a
// 4 GB address-space limit).
TEST(BinaryDataset, AHugeLineIsSkippedAsTooLongWithBoundedMemory) {
  TempDir dir;
  auto de = read_lines(test::sample_de()), en = read_lines(test::sample_en());
  de.resize(20);
  en.resize(20);
  std::string src_text, tgt_text;
  for (size_t i = 0; i < de.size(); ++i) {
    src_text += de[i] + "\n";
    tgt_text += en[i] + "\n";
  }
  src_text += std::string(50u << 20, 'a');  // the last line, without its newline
  tgt_text += "A very long line.";
  test::write_text(dir.file("h.de"), src_text);
  test::write_text(dir.file("h.en"), tgt_text);
  src_text.clear();
  src_text.shrink_to_fit();
  {
    LineReader reader(dir.file("h.de"));
    reader.set_max_line_bytes(1000);
    std::string line;
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(reader.next(line) && !reader.truncated());
    ASSERT_TRUE(reader.next(line));
    EXPECT_TRUE(reader.truncated());
    EXPECT_EQ(line.size(), 1000u);
    EXPECT_FALSE(reader.next(line));
  }
  preprocess_corpus(dir.file("h.de"), dir.file("h.en"), sample_tokenizer(), dir.file("h"), {});
  const auto dataset = BinaryDataset::open(dir.file("h"));
  EXPECT_EQ(dataset->manifest().stats.total, 21);
  EXPECT_EQ(dataset->manifest().stats.too_long, 1);
  EXPECT_EQ(dataset->size(), 20);
}

// `train` asks between chunks whether to stop (SIGINT during its set-up): the encoding ends with
// StopRequested and leaves neither the dataset nor its partial directory.
TEST(BinaryDataset, AStopRequestEndsPreprocessingWithNothingLeft) {
  TempDir dir;
  write_corpus(dir);
  PreprocessOptions options;
  options.chunk_pairs = 50;
  int chunks = 0;
  options.should_stop = [&] { return ++chunks == 2; };
  EXPECT_THROW(preprocess_corpus(dir.file("c.de"), dir.file("c.en"), sample_tokenizer(), dir.file("s"), options),
               StopRequested);
  EXPECT_EQ(chunks, 2);
  EXPECT_FALSE(fs::exists(dir.file("s")));
  EXPECT_FALSE(fs::exists(dir.file("s.partial")));
}

TEST(BinaryDataset, RunCacheIsReusedAndRebuiltWhenStaleOrDamaged) {
  TempDir dir;
  write_corpus(dir);
  const Tokenizer& tok = sample_tokenizer();
  std::string how;
  auto first = cached_dataset(dir.file("c.de"), dir.file("c.en"), tok, tok, dir.file("cache"), {}, how);
  EXPECT_EQ(how, "encoded");
  const std::string path = first->dir();
  first.reset();
  auto again = cached_dataset(dir.file("c.de"), dir.file("c.en"), tok, tok, dir.file("cache"), {}, how);
  EXPECT_EQ(how, "cached");
  again.reset();
  // Same size, same modification time, different content: still detected.
  auto en = read_lines(dir.file("c.en"));
  const auto mtime = fs::last_write_time(dir.file("c.en"));
  std::swap(en[0], en[1]);
  write_lines(dir.file("c.en"), en);
  fs::last_write_time(dir.file("c.en"), mtime);
  auto changed = cached_dataset(dir.file("c.de"), dir.file("c.en"), tok, tok, dir.file("cache"), {}, how);
  EXPECT_EQ(how, "re-encoded (an input changed)");
  expect_same_pairs(*changed, load_parallel_corpus(dir.file("c.de"), dir.file("c.en"), tok, tok, {}));
  changed.reset();
  std::string bytes = test::read_text(path + "/tgt.tokens");
  bytes[10] ^= 1;
  test::write_text(path + "/tgt.tokens", bytes);
  auto repaired = cached_dataset(dir.file("c.de"), dir.file("c.en"), tok, tok, dir.file("cache"), {}, how);
  EXPECT_NE(how.find("checksum mismatch"), std::string::npos) << how;
  expect_same_pairs(*repaired, load_parallel_corpus(dir.file("c.de"), dir.file("c.en"), tok, tok, {}));
}

TEST(TrainingCorpora, ListsAreCheckedEntryByEntry) {
  TempDir dir;
  TrainOptions o;
  o.train_data = dir.file("list.yaml");
  auto error_for = [&](const std::string& yaml) {
    test::write_text(o.train_data, yaml);
    return error_of([&] { corpus_specs(o); });
  };
  EXPECT_NE(error_for("corpora:\n  - {src: a, tgt: b, weight: 1, wieght: 2}\n").find("unknown key 'wieght'"), std::string::npos);
  EXPECT_NE(error_for("corpora:\n  - {src: a, weight: 1}\n").find("corpus 1"), std::string::npos);
  EXPECT_NE(error_for("corpora:\n  - {data: d, weight: 0}\n").find("weight"), std::string::npos);
  EXPECT_NE(error_for("corpora:\n  - {data: d}\n").find("`weight` is missing"), std::string::npos);
  EXPECT_NE(error_for("corpora:\n  - {data: d, weight: x}\n").find("corpus 1"), std::string::npos);
  EXPECT_NE(error_for("- {name: a, data: d, weight: 1}\n- {name: a, data: e, weight: 1}\n").find("two corpora"),
            std::string::npos);
  EXPECT_NE(error_for("corpora: [unclosed\n").find("YAML"), std::string::npos);
  EXPECT_NE(error_for("corpora:\n  - {src: a, tgt: b, src: c, weight: 1}\n").find("key 'src' given twice"),
            std::string::npos);
  const auto specs = [&] {
    test::write_text(o.train_data, "corpora:\n  - {name: in, src: a.de, tgt: a.en, weight: 3}\n  - {data: web.dataset, weight: 1}\n");
    return corpus_specs(o);
  }();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "in");
  EXPECT_EQ(specs[1].name, "web.dataset");
  EXPECT_EQ(specs[1].weight, 1.0);
  EXPECT_EQ(dataset_tokenizer(specs), "web.dataset/spm.model");
}

// `preprocess` once, then `train --train-data` on the dataset alone and mixed 3:1 with the text.
TEST(TrainingCorpora, TrainsOnADatasetAndOnAWeightedMix) {
  TempDir dir;
  write_corpus(dir);
  auto r = test::run_command(test::torchmt_binary() + " preprocess --src " + dir.file("c.de") + " --tgt " +
                             dir.file("c.en") + " --spm " + test::sample_spm_path() + " -o " + dir.file("data") + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + dir.file("data")), std::string::npos) << r.output;
  r = test::run_command(test::torchmt_binary() + " preprocess --src " + dir.file("c.de") + " --tgt " +
                        test::sample_de() + ".missing --spm " + test::sample_spm_path() + " -o " + dir.file("x"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(".missing"), std::string::npos) << r.output;

  TrainOptions o = test::tiny_run(dir.file("run"));
  o.train_src = o.train_tgt = "";
  o.spm = "";  // the dataset's own model
  o.train_data = dir.file("data");
  o.max_steps = 2;
  EXPECT_EQ(Trainer(o).run().steps, 2);
  EXPECT_TRUE(fs::exists(dir.file("run/checkpoint_last.pt")));

  test::write_text(dir.file("mix.yaml"), "corpora:\n  - {name: text, src: " + dir.file("c.de") + ", tgt: " +
                                             dir.file("c.en") + ", weight: 3}\n  - {name: binary, data: " +
                                             dir.file("data") + ", weight: 1}\n");
  o.out = dir.file("mix");
  o.train_data = dir.file("mix.yaml");
  validate_on_the_sample(o, dir, 16);
  o.validate_every = 3;
  o.max_steps = 3;
  Trainer(o).run();
  const std::string metrics = test::read_text(dir.file("mix/metrics.csv"));
  EXPECT_NE(metrics.find(",corpus_pairs\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(",text="), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(";binary="), std::string::npos) << metrics;
}

// --both-directions: every corpus is drawn a second time with its sides swapped (the same
// pairs, not a second encoding), the languages are learned from the corpora as given, two
// vocabularies are refused, and a run draws from both directions.
TEST(TrainingCorpora, BothDirectionsDrawsEveryPairReversedToo) {
  TempDir dir;
  write_corpus(dir);
  const std::vector<CorpusSpec> specs{{"c", "", dir.file("c.de"), dir.file("c.en"), 0}};
  PreprocessOptions options;
  options.corpus.num_threads = 1;
  const TrainingCorpora one_way(specs, sample_tokenizer(), sample_tokenizer(), dir.file("cache"), options, {});
  const TrainingCorpora both(specs, sample_tokenizer(), sample_tokenizer(), dir.file("cache"), options, {}, true);
  ASSERT_EQ(one_way.shares().size(), 1u);
  const auto shares = both.shares();
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].name, "c");
  EXPECT_EQ(shares[1].name, "c reversed");
  ASSERT_EQ(both.forward_shares().size(), 1u);
  EXPECT_EQ(both.forward_shares()[0].source, shares[0].source);
  EXPECT_EQ(both.pairs(), 2 * one_way.pairs());
  const PairSource& forward = *shares[0].source;
  const PairSource& reversed = *shares[1].source;
  ASSERT_EQ(reversed.size(), forward.size());
  ASSERT_GT(forward.size(), 8);
  for (int64_t i = 0; i < forward.size(); ++i) {
    ASSERT_EQ(ids_of(reversed, i, true), ids_of(forward, i, false)) << "pair " << i;
    ASSERT_EQ(ids_of(reversed, i, false), ids_of(forward, i, true)) << "pair " << i;
    ASSERT_EQ(reversed.line(i), forward.line(i)) << "pair " << i;
  }
  EXPECT_NE(ids_of(reversed, 0, true), ids_of(forward, 0, true));
  EXPECT_EQ(both.counts_field({5, 7}), "c=5;c reversed=7");

  const Tokenizer unigram = Tokenizer::load(test::sample_unigram_spm_path());
  const std::string error = error_of([&] {
    TrainingCorpora(specs, sample_tokenizer(), unigram, dir.file("cache2"), options, {}, true);
  });
  EXPECT_NE(error.find("--both-directions needs one vocabulary"), std::string::npos) << error;

  TrainOptions o = test::tiny_run(dir.file("run"), dir.file("c.de"), dir.file("c.en"));
  o.both_directions = true;
  o.max_steps = 40;
  validate_on_the_sample(o, dir, 8);
  Trainer(o).run();
  const std::string metrics = test::read_text(dir.file("run/metrics.csv"));
  const auto drawn = [&](const std::string& name) {
    const size_t at = metrics.rfind(name + "=");
    return at == std::string::npos ? -1 : std::stoll(metrics.substr(at + name.size() + 1));
  };
  EXPECT_GT(drawn("train"), 0) << metrics;
  EXPECT_GT(drawn("train reversed"), 0) << metrics;
  const auto meta = load_checkpoint(dir.file("run/checkpoint_last.pt"), torch::kCPU).meta;
  EXPECT_EQ(meta.source_language, "de");
  EXPECT_EQ(meta.target_language, "en");
  EXPECT_TRUE(meta.both_directions);
  EXPECT_EQ(checkpoint_languages(meta).identifier.best("Zwei Männer sitzen auf einer Bank."), "de");
}

}  // namespace
}  // namespace torchmt
