// BPE-dropout: without dropout it is SentencePiece's own segmentation; with it, segmentations of
// the same text that vary with the key only; and the batcher resegments every epoch while
// resuming exactly.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data/bpe_dropout.h"
#include "data/text_file.h"
#include "data/token_batcher.h"
#include "data_test_support.h"
#include "test_support.h"

namespace torchmt {
namespace {

using test::sample_tokenizer;

std::vector<std::string> sample_lines() {
  std::vector<std::string> lines = read_lines(test::sample_de());
  for (auto& line : read_lines(test::sample_en())) lines.push_back(line);
  return lines;
}

std::vector<int64_t> sampled(const BpeDropout& dropout, const std::vector<int64_t>& ids, uint64_t key) {
  std::vector<int64_t> out;
  dropout.sample(ids.data(), static_cast<int64_t>(ids.size()), key, out);
  return out;
}

TEST(BpeDropout, WithoutDropoutItIsSentencePiecesSegmentation) {
  const Tokenizer& tok = sample_tokenizer();
  const BpeDropout none(tok, 0.0, 1000);
  int64_t merged = 0;
  for (const auto& line : sample_lines()) {
    const std::vector<int64_t> ids = tok.encode(line);
    EXPECT_EQ(sampled(none, ids, 7), ids) << line;
    // From single characters too: the merges are done again, not the input returned.
    std::vector<int64_t> chars;
    for (const auto& piece : tok.encode_pieces(line))
      for (size_t i = 0; i < piece.size();) {
        size_t n = 1;
        while (i + n < piece.size() && (static_cast<unsigned char>(piece[i + n]) & 0xC0) == 0x80) ++n;
        chars.push_back(tok.piece_to_id(piece.substr(i, n)));
        i += n;
      }
    EXPECT_EQ(sampled(none, chars, 7), ids) << line;
    merged += static_cast<int64_t>(chars.size() - ids.size());
  }
  EXPECT_GT(merged, 1000);  // the sample's vocabulary merges; the comparison above is not vacuous
}

TEST(BpeDropout, SegmentationsSpellTheSameTextAndVaryWithTheKeyOnly) {
  const Tokenizer& tok = sample_tokenizer();
  const BpeDropout light(tok, 0.1, 1000), heavy(tok, 0.5, 1000);
  int64_t base = 0, light_total = 0, heavy_total = 0, changed = 0;
  const auto lines = sample_lines();
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::vector<int64_t> ids = tok.encode(lines[k]);
    const std::string text = tok.decode(ids);
    const auto a = sampled(light, ids, k), b = sampled(heavy, ids, k);
    EXPECT_EQ(tok.decode(a), text);
    EXPECT_EQ(tok.decode(b), text);
    EXPECT_EQ(sampled(light, ids, k), a);  // a function of the key
    for (int64_t id : b) EXPECT_TRUE(tok.is_normal_piece(id)) << lines[k];
    base += static_cast<int64_t>(ids.size());
    light_total += static_cast<int64_t>(a.size());
    heavy_total += static_cast<int64_t>(b.size());
    changed += a != ids;
  }
  EXPECT_GT(light_total, base);
  EXPECT_GT(heavy_total, light_total);
  EXPECT_GT(changed, static_cast<int64_t>(lines.size()) / 4);
  // Different keys, different segmentations of one long sentence.
  const auto ids = tok.encode(lines.front() + " " + lines.back());
  std::set<std::vector<int64_t>> seen;
  for (uint64_t key = 0; key < 20; ++key) seen.insert(sampled(light, ids, key));
  EXPECT_GE(seen.size(), 5u);
}

TEST(BpeDropout, ASegmentationOverTheLimitKeepsTheStoredIds) {
  const Tokenizer& tok = sample_tokenizer();
  const auto ids = tok.encode(sample_lines().front());
  const BpeDropout capped(tok, 0.9, static_cast<int64_t>(ids.size()));
  for (uint64_t key = 0; key < 10; ++key) EXPECT_EQ(sampled(capped, ids, key), ids);
}

TEST(BpeDropout, RefusesBadProbabilitiesOtherModelsAndUnknownIds) {
  const Tokenizer& tok = sample_tokenizer();
  for (double p : {-0.1, 1.0, 1.5}) EXPECT_THROW(BpeDropout(tok, p, 100), std::invalid_argument) << p;
  const Tokenizer unigram = Tokenizer::load(test::sample_unigram_spm_path());
  EXPECT_FALSE(unigram.is_bpe());
  EXPECT_TRUE(tok.is_bpe());
  EXPECT_THROW(BpeDropout(unigram, 0.1, 100), std::invalid_argument);
  const BpeDropout dropout(tok, 0.1, 100);
  EXPECT_THROW(sampled(dropout, {5, tok.vocab_size()}, 1), std::out_of_range);
}

const EncodedCorpus& sample_corpus() {
  static const EncodedCorpus corpus =
      load_parallel_corpus(test::sample_de(), test::sample_en(), sample_tokenizer(), sample_tokenizer(), {});
  return corpus;
}

BatcherOptions dropout_options(double p, int64_t window_pairs) {
  BatcherOptions o{300, 5, true};
  o.window_pairs = window_pairs;
  o.src_dropout = o.tgt_dropout = std::make_shared<BpeDropout>(sample_tokenizer(), p, 255);
  return o;
}

// The rows of one epoch by pair: its source and target ids as batched.
std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> epoch_rows(TokenBatcher& batcher,
                                                                                    int64_t batch_tokens) {
  std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> rows;
  const SpecialIds special;
  for (int64_t b = 0, n = batcher.batches_per_epoch(); b < n; ++b) {
    const Batch batch = batcher.next(torch::kCPU);
    EXPECT_LE(batch.src.size(0) * (batch.src.size(1) + batch.tgt_in.size(1)), batch_tokens);
    for (int64_t r = 0; r < batch.src.size(0); ++r) {
      auto row = [&](const at::Tensor& t) {
        std::vector<int64_t> ids;
        for (int64_t j = 0; j < t.size(1); ++j) {
          const int64_t id = t[r][j].item<int64_t>();
          if (id == special.eos || id == special.pad) break;
          ids.push_back(id);
        }
        return ids;
      };
      EXPECT_TRUE(rows.emplace(batch.indices[static_cast<size_t>(r)], std::make_pair(row(batch.src), row(batch.tgt_out)))
                      .second);
    }
  }
  return rows;
}

TEST(BpeDropout, TheBatcherResegmentsEachEpochAndResumesExactly) {
  const Tokenizer& tok = sample_tokenizer();
  const EncodedCorpus& corpus = sample_corpus();
  for (int64_t window : {int64_t{0}, int64_t{100}}) {
    TokenBatcher batcher(corpus, dropout_options(0.1, window));
    const auto first = epoch_rows(batcher, 300), second = epoch_rows(batcher, 300);
    ASSERT_EQ(first.size(), corpus.pairs.size());
    ASSERT_EQ(second.size(), corpus.pairs.size());
    int64_t changed = 0, changed_again = 0;
    for (const auto& pair : corpus.pairs) {
      const std::vector<int64_t> src(pair.src.begin(), pair.src.end()), tgt(pair.tgt.begin(), pair.tgt.end());
      const auto& [s1, t1] = first.at(pair.index);
      const auto& [s2, t2] = second.at(pair.index);
      EXPECT_EQ(tok.decode(s1), tok.decode(src));
      EXPECT_EQ(tok.decode(t1), tok.decode(tgt));
      EXPECT_EQ(tok.decode(t2), tok.decode(tgt));
      changed += s1 != src || t1 != tgt;
      changed_again += s1 != s2 || t1 != t2;
    }
    EXPECT_GT(changed, static_cast<int64_t>(corpus.pairs.size()) / 2) << "window " << window;
    EXPECT_GT(changed_again, static_cast<int64_t>(corpus.pairs.size()) / 2) << "window " << window;

    // Resuming anywhere gives the batches of the uninterrupted run.
    TokenBatcher run(corpus, dropout_options(0.1, window));
    const int64_t n = run.batches_per_epoch();
    std::vector<Batch> stream;
    for (int64_t i = 0; i < n + 3; ++i) stream.push_back(run.next(torch::kCPU));
    for (int64_t k : {int64_t{1}, n - 1, n + 1}) {
      TokenBatcher resumed(corpus, dropout_options(0.1, window));
      resumed.seek(1 + k / n, k % n);
      for (int64_t j = k; j < static_cast<int64_t>(stream.size()); ++j) {
        const Batch b = resumed.next(torch::kCPU);
        EXPECT_EQ(b.indices, stream[static_cast<size_t>(j)].indices);
        EXPECT_TRUE(torch::equal(b.src, stream[static_cast<size_t>(j)].src));
        EXPECT_TRUE(torch::equal(b.tgt_in, stream[static_cast<size_t>(j)].tgt_in));
      }
    }
  }
  // Without dropout objects the batches are the stored ids, as before.
  TokenBatcher plain(corpus, {300, 5, true});
  for (const auto& [index, rows] : epoch_rows(plain, 300)) {
    const auto& pair = *std::find_if(corpus.pairs.begin(), corpus.pairs.end(), [&](const EncodedPair& p) { return p.index == index; });
    EXPECT_EQ(rows.first, std::vector<int64_t>(pair.src.begin(), pair.src.end()));
  }
}

}  // namespace
}  // namespace torchmt
