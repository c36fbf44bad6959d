// Token-budget batching: the budget holds, every pair once per epoch, determinism from
// (seed, epoch), exact resume with seek(), teacher-forcing tensors, and the device copy.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data_test_support.h"
#include "test_support.h"
#include "torchmt/data/special_ids.h"
#include "data/text_file.h"
#include "data/token_batcher.h"

namespace torchmt {
namespace {

using test::sample_tokenizer;
using test::TempDir;

const EncodedCorpus& sample_corpus() {
  static const EncodedCorpus corpus =
      load_parallel_corpus(test::sample_de(), test::sample_en(), sample_tokenizer(), sample_tokenizer(), {});
  return corpus;
}

std::vector<std::vector<int64_t>> epoch_indices(TokenBatcher& batcher) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < batcher.batches_per_epoch(); ++i) out.push_back(batcher.next(torch::kCPU).indices);
  return out;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_TRUE(torch::equal(a.src.cpu(), b.src.cpu()));
  EXPECT_TRUE(torch::equal(a.tgt_in.cpu(), b.tgt_in.cpu()));
  EXPECT_TRUE(torch::equal(a.tgt_out.cpu(), b.tgt_out.cpu()));
}

TEST(TokenBatcher, EveryBatchRespectsTheBudget) {
  for (int64_t batch_tokens : {64, 200, 1000, 4096}) {
    TokenBatcher batcher(sample_corpus(), {batch_tokens, 1, true});
    EXPECT_EQ(batcher.oversized_pairs(), 0);
    for (int64_t i = 0; i < batcher.batches_per_epoch(); ++i) {
      Batch b = batcher.next(torch::kCPU);
      const int64_t padded = b.src.size(0) * (b.src.size(1) + b.tgt_in.size(1));
      EXPECT_LE(padded, batch_tokens) << "batch " << i;
      EXPECT_EQ(b.src.size(0), static_cast<int64_t>(b.indices.size()));
    }
    EXPECT_GE(batcher.padding_fraction(), 0.0);
    EXPECT_LT(batcher.padding_fraction(), 0.5);
  }
}

TEST(TokenBatcher, EveryPairExactlyOncePerEpoch) {
  TokenBatcher batcher(sample_corpus(), {300, 5, true});
  for (int epoch = 1; epoch <= 3; ++epoch) {
    EXPECT_EQ(batcher.epoch(), epoch);
    EXPECT_EQ(batcher.batch_index(), 0);
    std::map<int64_t, int> seen;
    for (const auto& indices : epoch_indices(batcher)) {
      for (int64_t i : indices) ++seen[i];
    }
    ASSERT_EQ(seen.size(), sample_corpus().pairs.size());
    for (const auto& [index, count] : seen) EXPECT_EQ(count, 1) << "pair " << index;
  }
}

TEST(TokenBatcher, OrderIsAFunctionOfSeedAndEpoch) {
  TokenBatcher a(sample_corpus(), {300, 42, true});
  TokenBatcher b(sample_corpus(), {300, 42, true});
  TokenBatcher other_seed(sample_corpus(), {300, 43, true});
  auto a1 = epoch_indices(a), a2 = epoch_indices(a);
  EXPECT_EQ(a1, epoch_indices(b));
  EXPECT_EQ(a2, epoch_indices(b));
  EXPECT_NE(a1, a2);  // reshuffled per epoch
  EXPECT_NE(a1, epoch_indices(other_seed));
  // Without shuffling: length order, every epoch.
  TokenBatcher fixed(sample_corpus(), {300, 42, false});
  EXPECT_EQ(epoch_indices(fixed), epoch_indices(fixed));
}

TEST(TokenBatcher, SeekResumesExactly) {
  TokenBatcher run(sample_corpus(), {256, 9, true});
  const int64_t n = run.batches_per_epoch();
  ASSERT_GT(n, 4);
  std::vector<Batch> stream;
  for (int64_t i = 0; i < 2 * n + 3; ++i) stream.push_back(run.next(torch::kCPU));
  EXPECT_EQ(run.epoch(), 3);
  EXPECT_EQ(run.batch_index(), 3);
  for (int64_t k : {int64_t{0}, int64_t{1}, n - 1, n, n + 2, 2 * n + 1}) {
    TokenBatcher resumed(sample_corpus(), {256, 9, true});
    resumed.seek(1 + k / n, k % n);
    EXPECT_EQ(resumed.epoch(), 1 + k / n);
    EXPECT_EQ(resumed.batch_index(), k % n);
    for (int64_t j = k; j < static_cast<int64_t>(stream.size()); ++j) {
      expect_same_batch(resumed.next(torch::kCPU), stream[static_cast<size_t>(j)]);
    }
  }
  TokenBatcher end(sample_corpus(), {256, 9, true});
  end.seek(1, n);  // the end of epoch 1 is the start of epoch 2
  EXPECT_EQ(end.epoch(), 2);
  EXPECT_EQ(end.batch_index(), 0);
  expect_same_batch(end.next(torch::kCPU), stream[static_cast<size_t>(n)]);
  EXPECT_THROW(end.seek(0, 0), std::invalid_argument);
  EXPECT_THROW(end.seek(1, n + 1), std::invalid_argument);
}

// Data-parallel ranks skip each other's batches: skipping k and taking the next is taking the
// (k+1)-th, across an epoch's end too.
TEST(TokenBatcher, SkipMovesPastABatchWithoutBuildingIt) {
  TokenBatcher run(sample_corpus(), {256, 9, true});
  const int64_t n = run.batches_per_epoch();
  std::vector<Batch> stream;
  for (int64_t i = 0; i < n + 3; ++i) stream.push_back(run.next(torch::kCPU));
  TokenBatcher skipping(sample_corpus(), {256, 9, true});
  for (int64_t i = 0; i < n + 3; ++i) {
    if (i % 2 == 0) {
      skipping.skip();
      continue;
    }
    expect_same_batch(skipping.next(torch::kCPU), stream[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(skipping.epoch(), run.epoch());
  EXPECT_EQ(skipping.batch_index(), run.batch_index());
}

// Windows: a corpus larger than one window is a fresh permutation per epoch, cut into windows
// that are sorted and batched on their own; every pair still comes exactly once per epoch.
TEST(TokenBatcher, WindowedEpochsHaveEveryPairOnceAndResumeExactly) {
  BatcherOptions o{300, 5, true, 90};
  TokenBatcher batcher(sample_corpus(), o);
  EXPECT_EQ(batcher.windows_per_epoch(), (sample_corpus().size() + 89) / 90);
  std::vector<std::vector<std::vector<int64_t>>> epochs;
  std::vector<Batch> stream;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    ASSERT_EQ(batcher.epoch(), epoch);
    const int64_t n = batcher.batches_per_epoch();
    std::map<int64_t, int> seen;
    std::vector<std::vector<int64_t>> batches;
    for (int64_t i = 0; i < n; ++i) {
      Batch b = batcher.next(torch::kCPU);
      EXPECT_LE(b.src.size(0) * (b.src.size(1) + b.tgt_in.size(1)), 300);
      for (int64_t index : b.indices) ++seen[index];
      batches.push_back(b.indices);
      stream.push_back(std::move(b));
    }
    ASSERT_EQ(seen.size(), sample_corpus().pairs.size());
    for (const auto& [index, count] : seen) EXPECT_EQ(count, 1) << "pair " << index;
    epochs.push_back(batches);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  // A window holds other pairs each epoch (a fresh permutation), so the padding differs little.
  EXPECT_LT(batcher.padding_fraction(), 0.5);
  TokenBatcher again(sample_corpus(), o);
  const int64_t n1 = again.batches_per_epoch();
  for (int64_t k : {int64_t{0}, int64_t{5}, n1 - 1, n1, n1 + 7}) {
    TokenBatcher resumed(sample_corpus(), o);
    resumed.seek(k < n1 ? 1 : 2, k < n1 ? k : k - n1);
    for (int64_t j = k; j < k + 12; ++j) expect_same_batch(resumed.next(torch::kCPU), stream[static_cast<size_t>(j)]);
  }
  // Skipping (another rank's batches) crosses windows like next() does.
  TokenBatcher skipping(sample_corpus(), o);
  for (int64_t i = 0; i < n1 + 5; ++i) {
    if (i % 3 != 2) {
      skipping.skip();
      continue;
    }
    expect_same_batch(skipping.next(torch::kCPU), stream[static_cast<size_t>(i)]);
  }
}

// One window covering the corpus is the global sort, whatever the window size.
TEST(TokenBatcher, AWindowAsLargeAsTheCorpusIsTheGlobalSort) {
  TokenBatcher global(sample_corpus(), {300, 4, true, 0});
  TokenBatcher windowed(sample_corpus(), {300, 4, true, 1 << 20});
  EXPECT_EQ(global.windows_per_epoch(), 1);
  EXPECT_EQ(epoch_indices(global), epoch_indices(windowed));
  EXPECT_EQ(epoch_indices(global), epoch_indices(windowed));
}

EncodedCorpus small_corpus(int pairs, int32_t token) {
  EncodedCorpus c;
  for (int i = 0; i < pairs; ++i)
    c.pairs.push_back({std::vector<int32_t>(3 + i % 5, token), std::vector<int32_t>(2 + i % 3, token), i});
  return c;
}

// Weights set each corpus's share of an epoch's pairs; a small corpus is drawn again and again,
// each pass a new permutation; drawn_pairs() is exact at every position.
TEST(TokenBatcher, WeightedCorporaAreDrawnInProportion) {
  const EncodedCorpus big = small_corpus(600, 7), little = small_corpus(40, 9);
  TokenBatcher batcher({{&big, 1, "big"}, {&little, 1, "little"}}, {200, 3, true, 256});
  ASSERT_EQ(batcher.pairs_per_epoch(), (std::vector<int64_t>{320, 320}));
  std::vector<int64_t> counted(2, 0);
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const int64_t n = batcher.batches_per_epoch();
    std::map<int64_t, int> little_seen;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(batcher.drawn_pairs(batcher.epoch(), batcher.batch_index()), counted);
      Batch b = batcher.next(torch::kCPU);
      ASSERT_EQ(b.corpus_rows.size(), 2u);
      counted[0] += b.corpus_rows[0];
      counted[1] += b.corpus_rows[1];
      for (int64_t r = 0; r < b.src.size(0); ++r)
        if (b.src[r][0].item<int64_t>() == 9) ++little_seen[b.indices[static_cast<size_t>(r)]];
    }
    EXPECT_EQ(counted[0], 320 * epoch);
    EXPECT_EQ(counted[1], 320 * epoch);
    ASSERT_EQ(little_seen.size(), 40u);  // 320 draws: every pair 8 times
    for (const auto& [index, count] : little_seen) EXPECT_EQ(count, 8) << index;
  }
  // Unweighted: plain concatenation, each corpus once per epoch.
  TokenBatcher plain({{&big, 0, "big"}, {&little, 0, "little"}}, {200, 3, true, 256});
  EXPECT_EQ(plain.pairs_per_epoch(), (std::vector<int64_t>{600, 40}));
  EXPECT_THROW(TokenBatcher({{&big, 1, "big"}, {&little, 0, "little"}}, {}), std::invalid_argument);
  EXPECT_THROW(TokenBatcher({{&big, -1, "big"}}, {}), std::invalid_argument);
  // Extreme weights (their sum beyond a double) end in bounded time with every pair drawn once.
  TokenBatcher extreme({{&big, 1e308, "big"}, {&little, 1e308, "little"}}, {200, 3, true, 256});
  EXPECT_EQ(extreme.pairs_per_epoch(), (std::vector<int64_t>{320, 320}));
  TokenBatcher tiny_share({{&big, 1e308, "big"}, {&little, 1e-308, "little"}}, {200, 3, true, 256});
  EXPECT_EQ(tiny_share.pairs_per_epoch()[0] + tiny_share.pairs_per_epoch()[1], 640);
}

TEST(TokenBatcher, TeacherForcingTensors) {
  const auto& corpus = sample_corpus();
  std::map<int64_t, const EncodedPair*> by_index;
  for (const auto& p : corpus.pairs) by_index[p.index] = &p;
  TokenBatcher batcher(corpus, {500, 3, true});
  for (int64_t n = 0; n < batcher.batches_per_epoch(); ++n) {
    Batch b = batcher.next(torch::kCPU);
    ASSERT_EQ(b.src.scalar_type(), torch::kLong);
    ASSERT_EQ(b.tgt_in.sizes(), b.tgt_out.sizes());
    int64_t src_tokens = 0, tgt_tokens = 0;
    for (int64_t r = 0; r < b.src.size(0); ++r) {
      const EncodedPair& p = *by_index.at(b.indices[static_cast<size_t>(r)]);
      const int64_t s = static_cast<int64_t>(p.src.size()), t = static_cast<int64_t>(p.tgt.size());
      auto src = b.src[r], tin = b.tgt_in[r], tout = b.tgt_out[r];
      for (int64_t i = 0; i < s; ++i) ASSERT_EQ(src[i].item<int64_t>(), p.src[static_cast<size_t>(i)]);
      EXPECT_EQ(src[s].item<int64_t>(), kEosId);
      EXPECT_EQ(tin[0].item<int64_t>(), kBosId);
      for (int64_t i = 0; i < t; ++i) {
        ASSERT_EQ(tin[i + 1].item<int64_t>(), p.tgt[static_cast<size_t>(i)]);
        ASSERT_EQ(tout[i].item<int64_t>(), p.tgt[static_cast<size_t>(i)]);
      }
      EXPECT_EQ(tout[t].item<int64_t>(), kEosId);
      EXPECT_TRUE(src.slice(0, s + 1).eq(kPadId).all().item<bool>());
      EXPECT_TRUE(tin.slice(0, t + 1).eq(kPadId).all().item<bool>());
      EXPECT_TRUE(tout.slice(0, t + 1).eq(kPadId).all().item<bool>());
      src_tokens += s + 1;
      tgt_tokens += t + 1;
    }
    EXPECT_EQ(b.src_tokens, src_tokens);
    EXPECT_EQ(b.tgt_tokens, tgt_tokens);
    EXPECT_EQ(b.src.ne(kPadId).sum().item<int64_t>(), src_tokens);
    EXPECT_EQ(b.tgt_out.ne(kPadId).sum().item<int64_t>(), tgt_tokens);
  }
}

TEST(TokenBatcher, OversizedPairIsABatchOfItsOwn) {
  EncodedCorpus corpus;
  for (int i = 0; i < 10; ++i) corpus.pairs.push_back({std::vector<int32_t>(5, 7), std::vector<int32_t>(4, 8), i});
  corpus.pairs.push_back({std::vector<int32_t>(60, 7), std::vector<int32_t>(50, 8), 10});
  TokenBatcher batcher(corpus, {40, 1, true});
  EXPECT_EQ(batcher.oversized_pairs(), 1);
  std::set<int64_t> seen;
  bool found = false;
  for (int64_t i = 0; i < batcher.batches_per_epoch(); ++i) {
    Batch b = batcher.next(torch::kCPU);
    seen.insert(b.indices.begin(), b.indices.end());
    if (std::find(b.indices.begin(), b.indices.end(), 10) != b.indices.end()) {
      EXPECT_EQ(b.indices.size(), 1u);
      EXPECT_EQ(b.src.size(1), 61);
      found = true;
    } else {
      EXPECT_LE(b.src.size(0) * (b.src.size(1) + b.tgt_in.size(1)), 40);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(seen.size(), 11u);
}

TEST(TokenBatcher, EmptyCorpusHasNoBatches) {
  EncodedCorpus corpus;
  TokenBatcher batcher(corpus, {});
  EXPECT_EQ(batcher.batches_per_epoch(), 0);
  EXPECT_THROW(batcher.next(torch::kCPU), std::runtime_error);
}

TEST(TokenBatcher, GzipAndPlainGiveIdenticalBatches) {
  TempDir dir;
  write_lines(dir.file("de.gz"), read_lines(test::sample_de()));
  write_lines(dir.file("en.gz"), read_lines(test::sample_en()));
  auto gz = load_parallel_corpus(dir.file("de.gz"), dir.file("en.gz"), sample_tokenizer(), sample_tokenizer(), {});
  TokenBatcher a(sample_corpus(), {400, 11, true});
  TokenBatcher b(gz, {400, 11, true});
  ASSERT_EQ(a.batches_per_epoch(), b.batches_per_epoch());
  for (int64_t i = 0; i < a.batches_per_epoch(); ++i) expect_same_batch(a.next(torch::kCPU), b.next(torch::kCPU));
}

TEST(TokenBatcher, CudaBatchMatchesCpu) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  TokenBatcher cpu(sample_corpus(), {400, 2, true});
  TokenBatcher gpu(sample_corpus(), {400, 2, true});
  for (int64_t i = 0; i < cpu.batches_per_epoch(); ++i) {
    Batch g = gpu.next(torch::Device(torch::kCUDA));
    ASSERT_TRUE(g.src.is_cuda());
    ASSERT_TRUE(g.tgt_out.is_cuda());
    expect_same_batch(cpu.next(torch::kCPU), g);
  }
}

}  // namespace
}  // namespace torchmt
