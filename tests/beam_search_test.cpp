// Greedy and beam search over a scripted fake decoder whose next-token probabilities the
// test chooses (fairseq tests/utils.py style), then over a real (random) Transformer.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

#include <torch/torch.h>

#include "decoding/greedy_stream.h"
#include "torchmt/decoding/search.h"
#include "decoding/transformer_decoder.h"

namespace torchmt {
namespace {

constexpr int64_t kVocab = 6;  // 0 pad, 1 unk, 2 bos, 3 eos, 4 "a", 5 "b"
constexpr int64_t A = 4, B = 5, EOS = 3;

// Probabilities as a function of (sentence id, prefix so far). The sentence id is the
// first source token, so one batch can mix scripted scenarios.
using Script = std::function<std::vector<double>(int64_t sentence, const std::vector<int64_t>& prefix)>;

class ScriptedDecoder : public IncrementalDecoder {
 public:
  explicit ScriptedDecoder(Script script, bool joinable = false) : script_(std::move(script)), joinable_(joinable) {}
  bool can_join() const override { return joinable_; }
  void join(const at::Tensor& src) override {
    if (!joinable_) IncrementalDecoder::join(src);
    for (int64_t i = 0; i < src.size(0); ++i) rows_.push_back({src[i][0].item<int64_t>(), {}});
    joins_ += 1;
  }
  int64_t starts() const { return starts_; }
  int64_t joins() const { return joins_; }
  void start(const at::Tensor& src) override {
    rows_.clear();
    for (int64_t i = 0; i < src.size(0); ++i) rows_.push_back({src[i][0].item<int64_t>(), {}});
    started_ = true;
    starts_ += 1;
  }
  at::Tensor step(const at::Tensor& last_tokens) override {
    EXPECT_EQ(last_tokens.size(0), static_cast<int64_t>(rows_.size()));
    auto out = torch::empty({static_cast<int64_t>(rows_.size()), kVocab});
    for (size_t r = 0; r < rows_.size(); ++r) {
      const int64_t tok = last_tokens[static_cast<int64_t>(r)].item<int64_t>();
      if (tok != 2) rows_[r].prefix.push_back(tok);
      auto p = script_(rows_[r].sentence, rows_[r].prefix);
      for (int64_t v = 0; v < kVocab; ++v) out[static_cast<int64_t>(r)][v] = std::log(p[v]);  // log 0 = -inf
    }
    steps_ += 1;
    rows_stepped_ += static_cast<int64_t>(rows_.size());
    return out;
  }
  void select(const at::Tensor& index) override {
    std::vector<Row> next;
    for (int64_t i = 0; i < index.size(0); ++i) next.push_back(rows_[index[i].item<int64_t>()]);
    rows_ = std::move(next);
  }
  at::Device device() const override { return torch::kCPU; }
  int64_t rows_stepped() const { return rows_stepped_; }

 private:
  struct Row {
    int64_t sentence;
    std::vector<int64_t> prefix;
  };
  Script script_;
  std::vector<Row> rows_;
  bool joinable_ = false;
  bool started_ = false;
  int64_t steps_ = 0, rows_stepped_ = 0, starts_ = 0, joins_ = 0;
};

std::vector<double> dist(double a, double b, double eos) { return {0, 0, 0, eos, a, b}; }

// Greedy takes "a" (0.6) and then can only end badly; the best sequence starts with "b".
std::vector<double> garden_path(int64_t, const std::vector<int64_t>& prefix) {
  if (prefix.empty()) return dist(0.6, 0.4, 0.0);
  if (prefix == std::vector<int64_t>{A}) return dist(0.35, 0.31, 0.34);
  if (prefix == std::vector<int64_t>{B}) return dist(0.05, 0.05, 0.9);
  return dist(0.0, 0.0, 1.0);
}

SearchOptions options(int64_t beam, int64_t nbest = 1) {
  SearchOptions o;
  o.beam_size = beam;
  o.nbest = nbest;
  o.length_penalty = 0.0;  // raw log-probabilities: easy to check by hand
  o.max_len_a = 0;
  o.max_len_b = 10;
  return o;
}

at::Tensor sources(std::vector<int64_t> ids) { return torch::tensor(ids, torch::kLong).unsqueeze(1); }  // [B, 1]

TEST(BeamSearch, FindsTheSequenceGreedyMisses) {
  ScriptedDecoder decoder(garden_path);
  auto greedy = greedy_search(decoder, sources({7}), options(1));
  EXPECT_EQ(greedy[0][0].tokens, (std::vector<int64_t>{A, A}));
  auto beam = beam_search(decoder, sources({7}), options(2));
  EXPECT_EQ(beam[0][0].tokens, (std::vector<int64_t>{B}));
  EXPECT_NEAR(beam[0][0].log_prob, std::log(0.4) + std::log(0.9), 1e-5);
}

TEST(BeamSearch, NbestIsSortedAndScoresAreTheSequenceLogProbs) {
  ScriptedDecoder decoder(garden_path);
  auto result = beam_search(decoder, sources({7}), options(3, 3));
  ASSERT_EQ(result[0].size(), 3u);
  for (size_t i = 1; i < result[0].size(); ++i) EXPECT_GE(result[0][i - 1].score, result[0][i].score);
  // Then "a a" (0.6 * 0.35, eos certain after it) and "a" (0.6 * 0.34).
  EXPECT_EQ(result[0][0].tokens, (std::vector<int64_t>{B}));
  EXPECT_EQ(result[0][1].tokens, (std::vector<int64_t>{A, A}));
  EXPECT_NEAR(result[0][1].log_prob, std::log(0.6 * 0.35), 1e-5);
  EXPECT_EQ(result[0][2].tokens, (std::vector<int64_t>{A}));
  EXPECT_NEAR(result[0][2].log_prob, std::log(0.6 * 0.34), 1e-5);
}

TEST(BeamSearch, LengthPenaltyFavoursLongerHypotheses) {
  // "b eos" (0.4) against "a a eos" (0.6 * 0.6 = 0.36): raw log-prob prefers the short
  // one, a strong GNMT penalty (alpha 2) the long one.
  Script script = [](int64_t, const std::vector<int64_t>& p) {
    if (p.empty()) return dist(0.6, 0.4, 0.0);
    if (p == std::vector<int64_t>{A}) return dist(0.6, 0.0, 0.4);
    return dist(0.0, 0.0, 1.0);
  };
  ScriptedDecoder decoder(script);
  auto raw = beam_search(decoder, sources({1}), options(2));
  EXPECT_EQ(raw[0][0].tokens, (std::vector<int64_t>{B}));
  auto o = options(2);
  o.length_penalty = 2.0;
  auto penalised = beam_search(decoder, sources({1}), o);
  EXPECT_EQ(penalised[0][0].tokens, (std::vector<int64_t>{A, A}));
}

TEST(BeamSearch, BeamOfOneIsGreedy) {
  // Random scripted distributions, several sentences in one batch.
  Script script = [](int64_t sentence, const std::vector<int64_t>& p) {
    uint64_t h = static_cast<uint64_t>(sentence) * 1000003u;
    for (auto t : p) h = h * 31 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(h);
    std::uniform_real_distribution<double> u(0.05, 1.0);
    double a = u(rng), b = u(rng), e = u(rng) * 0.6;
    double s = a + b + e;
    return dist(a / s, b / s, e / s);
  };
  ScriptedDecoder decoder(script);
  auto src = sources({1, 2, 3, 4, 5, 6, 7, 8});
  auto greedy = greedy_search(decoder, src, options(1));
  auto beam = beam_search(decoder, src, options(1));
  for (size_t i = 0; i < greedy.size(); ++i) {
    EXPECT_EQ(greedy[i][0].tokens, beam[i][0].tokens) << "sentence " << i;
    EXPECT_NEAR(greedy[i][0].score, beam[i][0].score, 1e-5) << greedy[i][0].log_prob << " " << beam[i][0].log_prob << " len " << greedy[i][0].tokens.size();
  }
}

TEST(BeamSearch, MaxLengthEndsHypothesesThatNeverEmitEos) {
  ScriptedDecoder decoder([](int64_t, const std::vector<int64_t>&) { return dist(0.7, 0.3, 0.0); });
  auto o = options(2);
  o.max_len_b = 5;  // max length 5 positions: 4 tokens + forced eos
  auto beam = beam_search(decoder, sources({1}), o);
  EXPECT_EQ(beam[0][0].tokens.size(), 4u);
  auto greedy = greedy_search(decoder, sources({1}), o);
  EXPECT_EQ(greedy[0][0].tokens, (std::vector<int64_t>{A, A, A, A}));
}

TEST(BeamSearch, FinishedSentencesLeaveTheBatch) {
  // Sentence 1 ends at once; sentence 2 runs for 6 steps. Rows stepped must reflect that
  // only sentence 2 stays in the batch, and that the first step runs one row per sentence.
  Script script = [](int64_t sentence, const std::vector<int64_t>& p) {
    if (sentence == 1) return dist(0.0, 0.0, 1.0);
    return p.size() < 5 ? dist(1.0, 0.0, 0.0) : dist(0.0, 0.0, 1.0);
  };
  ScriptedDecoder greedy_decoder(script);
  greedy_search(greedy_decoder, sources({1, 2}), options(1));
  EXPECT_EQ(greedy_decoder.rows_stepped(), 2 + 5);
  ScriptedDecoder beam_decoder(script);
  auto result = beam_search(beam_decoder, sources({1, 2}), options(2));
  EXPECT_EQ(result[1][0].tokens.size(), 5u);
  EXPECT_EQ(beam_decoder.rows_stepped(), 2 * 1 + 5 * 2);
}

// SearchOptions::stop is asked before every step: once it says yes, greedy and beam search end
// there with SearchStopped, after exactly the steps run before.
TEST(Search, StopEndsTheSearchAtTheNextStep) {
  Script never_ends = [](int64_t, const std::vector<int64_t>&) { return dist(0.7, 0.3, 0.0); };
  for (int64_t beam : {1, 3}) {
    SCOPED_TRACE("beam " + std::to_string(beam));
    auto o = options(beam);
    o.max_len_b = 50;
    int64_t asked = 0;
    o.stop = StopCheck([&asked] { return ++asked > 4; });
    ScriptedDecoder decoder(never_ends);
    EXPECT_THROW(search(decoder, sources({1, 2}), o), SearchStopped);
    EXPECT_EQ(asked, 5);
    EXPECT_EQ(decoder.rows_stepped(), beam == 1 ? 4 * 2 : 2 + 3 * 2 * beam);  // four steps, then no more
    o.stop = StopCheck([] { return false; });  // asked and never stopping: the search as without
    ScriptedDecoder whole(never_ends);
    EXPECT_EQ(search(whole, sources({1, 2}), o)[1][0].tokens.size(), 49u);
  }
}

TEST(BeamSearch, EarlyExitEndsASentenceWhenItsBestCandidateEnds) {
  // eos is the best first token (0.5); "a" and "b" each end one step later.
  Script script = [](int64_t, const std::vector<int64_t>& p) {
    return p.empty() ? dist(0.3, 0.2, 0.5) : dist(0.0, 0.0, 1.0);
  };
  ScriptedDecoder fairseq(script);
  auto full = beam_search(fairseq, sources({1}), options(2));
  EXPECT_EQ(fairseq.rows_stepped(), 1 + 2);  // on until two hypotheses are complete
  EXPECT_TRUE(full[0][0].tokens.empty());
  auto o = options(2);
  o.early_exit = true;
  ScriptedDecoder early(script);
  auto first = beam_search(early, sources({1}), o);
  EXPECT_EQ(early.rows_stepped(), 1);  // the best candidate ended it at step 0 (one row)
  ASSERT_EQ(first[0].size(), 1u);
  EXPECT_TRUE(first[0][0].tokens.empty());
  EXPECT_NEAR(first[0][0].log_prob, std::log(0.5), 1e-5);
  // With nbest 2 it goes on until a second hypothesis is complete, then stops.
  o.nbest = 2;
  ScriptedDecoder two(script);
  auto both = beam_search(two, sources({1}), o);
  EXPECT_EQ(two.rows_stepped(), 1 + 2);
  ASSERT_EQ(both[0].size(), 2u);
  EXPECT_EQ(both[0][1].tokens, (std::vector<int64_t>{A}));
  // A best candidate that continues does not end the sentence: "b" wins over eos here.
  Script later = [](int64_t, const std::vector<int64_t>& p) {
    if (p.empty()) return dist(0.1, 0.6, 0.3);
    return p.size() < 3 ? dist(0.0, 0.9, 0.1) : dist(0.0, 0.0, 1.0);
  };
  ScriptedDecoder longer(later);
  o.nbest = 1;
  auto result = beam_search(longer, sources({1}), o);
  EXPECT_EQ(result[0][0].tokens, (std::vector<int64_t>{B, B, B}));
}

TEST(BeamSearch, BatchedEqualsOneByOne) {
  Script script = [](int64_t sentence, const std::vector<int64_t>& p) {
    double bias = 0.1 * static_cast<double>(sentence % 5);
    if (p.size() >= static_cast<size_t>(2 + sentence % 3)) return dist(0.1, 0.1, 0.8);
    return dist(0.5 + bias / 2, 0.5 - bias / 2, 0.05);
  };
  ScriptedDecoder decoder(script);
  auto batch = beam_search(decoder, sources({1, 2, 3, 4}), options(3, 2));
  for (int64_t s = 1; s <= 4; ++s) {
    auto alone = beam_search(decoder, sources({s}), options(3, 2));
    ASSERT_EQ(alone[0].size(), batch[static_cast<size_t>(s - 1)].size());
    for (size_t i = 0; i < alone[0].size(); ++i)
      EXPECT_EQ(alone[0][i].tokens, batch[static_cast<size_t>(s - 1)][i].tokens);
  }
}

// The real decoder: the cached path and full recomputation produce the same tokens.
TEST(BeamSearch, CachedDecodingEqualsRecomputationOnARealModel) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 30;
  torch::manual_seed(4);
  Transformer model(c);
  model->eval();
  auto src = torch::randint(4, 30, {5, 7}, torch::kLong);
  src.index_put_({1, torch::indexing::Slice(4)}, 0);
  src.index_put_({3, torch::indexing::Slice(2)}, 0);
  for (int64_t beam : {1, 5}) {
    auto o = options(beam, beam);
    o.length_penalty = 0.6;
    TransformerDecoder cached(model, true), uncached(model, false);
    auto a = search(cached, src, o);
    auto b = search(uncached, src, o);
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t j = 0; j < a[i].size(); ++j) {
        EXPECT_EQ(a[i][j].tokens, b[i][j].tokens) << "beam " << beam << " sentence " << i;
        EXPECT_NEAR(a[i][j].score, b[i][j].score, 1e-4);
      }
  }
}

// Sentence s says "a" s times, then ends (each step certain enough to be greedy's pick).
std::vector<double> counts_to_its_id(int64_t sentence, const std::vector<int64_t>& prefix) {
  return static_cast<int64_t>(prefix.size()) < sentence ? dist(0.7, 0.2, 0.1) : dist(0.1, 0.1, 0.8);
}

TEST(GreedyStream, RowsJoiningBetweenStepsGetWhatTheyGetAloneAndLeaveWhenDone) {
  ScriptedDecoder decoder(counts_to_its_id, /*joinable=*/true);
  GreedyStream stream(decoder);
  std::map<int64_t, Hypothesis> done;
  auto collect = [&] {
    for (auto& [tag, h] : stream.take_finished()) EXPECT_TRUE(done.emplace(tag, std::move(h)).second) << tag;
  };
  stream.join(sources({3}), {10}, options(1));
  stream.step();
  stream.step();
  stream.join(sources({1, 5}), {11, 12}, options(1));
  EXPECT_EQ(stream.live(), 3);
  while (!stream.empty()) {
    stream.step();
    collect();
  }
  EXPECT_EQ(decoder.starts(), 1);
  EXPECT_EQ(decoder.joins(), 1);
  ASSERT_EQ(done.size(), 3u);
  const std::map<int64_t, int64_t> sentence_of = {{10, 3}, {11, 1}, {12, 5}};
  int64_t steps_alone = 0;
  for (const auto& [tag, sentence] : sentence_of) {
    ScriptedDecoder alone_decoder(counts_to_its_id);
    auto alone = greedy_search(alone_decoder, sources({sentence}), options(1))[0][0];
    EXPECT_EQ(done[tag].tokens, std::vector<int64_t>(static_cast<size_t>(sentence), A)) << tag;
    EXPECT_EQ(done[tag].tokens, alone.tokens) << tag;
    EXPECT_EQ(done[tag].log_prob, alone.log_prob) << tag;
    EXPECT_EQ(done[tag].score, alone.score) << tag;
    steps_alone += alone_decoder.rows_stepped();
  }
  // Every row is stepped exactly as often as alone (sentence + 1 times): ended rows left.
  EXPECT_EQ(decoder.rows_stepped(), steps_alone);
}

TEST(GreedyStream, EachRowKeepsItsOwnLengthLimit) {
  ScriptedDecoder decoder(counts_to_its_id, /*joinable=*/true);
  GreedyStream stream(decoder);
  stream.join(sources({6}), {0}, options(1));  // limit 10: room for all six
  stream.step();
  auto tight = options(1);
  tight.max_len_b = 3;  // two tokens, then eos is forced
  stream.join(sources({6}), {1}, tight);
  std::map<int64_t, Hypothesis> done;
  while (!stream.empty()) {
    stream.step();
    for (auto& [tag, h] : stream.take_finished()) done[tag] = std::move(h);
  }
  EXPECT_EQ(done[0].tokens.size(), 6u);
  EXPECT_EQ(done[1].tokens.size(), 2u);
  EXPECT_NEAR(done[1].log_prob, 2 * std::log(0.7) + std::log(0.1), 1e-6);
}

// A row whose request was abandoned ends at the next step with what it has; the others run on.
TEST(GreedyStream, RowsEndedEarlyFinishAtTheNextStep) {
  ScriptedDecoder decoder(counts_to_its_id, /*joinable=*/true);
  GreedyStream stream(decoder);
  stream.join(sources({6, 6}), {0, 1}, options(1));
  stream.step();
  stream.step();
  stream.end_early([](int64_t tag) { return tag == 1; });
  std::map<int64_t, Hypothesis> done;
  while (!stream.empty()) {
    stream.step();
    for (auto& [tag, h] : stream.take_finished()) done[tag] = std::move(h);
  }
  EXPECT_EQ(done[0].tokens.size(), 6u);
  EXPECT_EQ(done[1].tokens.size(), 2u);  // the two tokens before, then eos
}

TEST(GreedyStream, ADecoderThatCannotJoinStartsAfreshOnceTheStreamIsEmpty) {
  ScriptedDecoder decoder(counts_to_its_id);  // no join
  GreedyStream stream(decoder);
  stream.join(sources({2}), {0}, options(1));
  stream.step();
  EXPECT_THROW(stream.join(sources({1}), {1}, options(1)), std::logic_error);
  while (!stream.empty()) stream.step();
  EXPECT_EQ(stream.take_finished().size(), 1u);
  stream.join(sources({1}), {1}, options(1));  // empty again: a fresh start
  while (!stream.empty()) stream.step();
  auto finished = stream.take_finished();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].first, 1);
  EXPECT_EQ(finished[0].second.tokens, std::vector<int64_t>{A});
  EXPECT_EQ(decoder.starts(), 2);
  EXPECT_THROW(stream.join(sources({1, 2}), {1}, options(1)), std::invalid_argument);
}


// ---- steering: target prefixes ----------------------------------------------------------------

Steering prefixes(const std::vector<std::vector<int64_t>>& per_sentence) {
  Steering steering;
  for (const auto& p : per_sentence) steering.push_back(SentenceSteering{p, {}, 0});
  return steering;
}

TEST(TargetPrefix, GreedyAndBeamContinueAfterTheForcedTokensAndCountThem) {
  for (int64_t beam : {1, 2}) {
    ScriptedDecoder decoder(garden_path);
    // Sentence 0 is forced into "b" (greedy would take "a"); sentence 1 into "a b", against
    // the model; sentence 2 runs free in the same batch.
    auto result = search(decoder, sources({7, 7, 7}), options(beam), prefixes({{B}, {A, B}, {}}));
    SCOPED_TRACE("beam " + std::to_string(beam));
    EXPECT_EQ(result[0][0].tokens, (std::vector<int64_t>{B}));
    EXPECT_NEAR(result[0][0].log_prob, std::log(0.4) + std::log(0.9), 1e-5);
    EXPECT_EQ(result[1][0].tokens, (std::vector<int64_t>{A, B}));
    EXPECT_NEAR(result[1][0].log_prob, std::log(0.6) + std::log(0.31), 1e-5);  // then eos with probability 1
    EXPECT_EQ(result[2][0].tokens, beam == 1 ? (std::vector<int64_t>{A, A}) : (std::vector<int64_t>{B}));
  }
}

TEST(TargetPrefix, APrefixLongerThanTheLengthLimitIsKeptWhole) {
  auto never_ends = [](int64_t, const std::vector<int64_t>&) { return dist(0.5, 0.49, 0.01); };
  SearchOptions o = options(1);
  o.max_len_b = 1;  // room for eos only
  for (int64_t beam : {1, 3}) {
    ScriptedDecoder decoder(never_ends);
    o.beam_size = beam;
    auto result = search(decoder, sources({7}), o, prefixes({{B, B, A}}));
    EXPECT_EQ(result[0][0].tokens, (std::vector<int64_t>{B, B, A})) << "beam " << beam;
  }
}

TEST(TargetPrefix, AStreamRowJoiningARunningBatchGetsItsPrefix) {
  ScriptedDecoder decoder(garden_path, /*joinable=*/true);
  GreedyStream stream(decoder);
  stream.join(sources({7}), {0}, options(1));
  stream.step();
  stream.join(sources({7}), {1}, options(1), prefixes({{B}}));
  std::map<int64_t, Hypothesis> done;
  while (!stream.empty()) {
    stream.step();
    for (auto& [tag, h] : stream.take_finished()) done[tag] = h;
  }
  EXPECT_EQ(done[0].tokens, (std::vector<int64_t>{A, A}));
  EXPECT_EQ(done[1].tokens, (std::vector<int64_t>{B}));
}

// Patience: a beam of one ends at its first finished hypothesis, "a" (0.3); with patience 2 it
// goes on to a second, "a a" (0.27), which the length penalty prefers.
TEST(BeamSearch, PatienceSearchesOnUntilBeamTimesPatienceHypothesesAreFinished) {
  auto later_is_better = [](int64_t, const std::vector<int64_t>& prefix) {
    if (prefix.empty()) return dist(0.6, 0.4, 0.0);
    if (prefix.size() == 1 && prefix[0] == A) return dist(0.45, 0.05, 0.5);
    return dist(0, 0, 1);
  };
  SearchOptions o = options(1);
  o.length_penalty = 1.0;
  ScriptedDecoder plain(later_is_better), patient(later_is_better);
  const auto first = beam_search(plain, sources({7}), o)[0][0];
  EXPECT_EQ(first.tokens, std::vector<int64_t>{A});
  o.patience = 2.0;
  const auto second = beam_search(patient, sources({7}), o)[0][0];
  EXPECT_EQ(second.tokens, (std::vector<int64_t>{A, A}));
  EXPECT_NEAR(second.log_prob, std::log(0.6) + std::log(0.45), 1e-5);
  EXPECT_GT(patient.rows_stepped(), plain.rows_stepped());
  o.patience = 0.2;  // round(1 x 0.2) = 0 finished hypotheses would end nothing
  EXPECT_NE(search_problem(o, true).find("--patience"), std::string::npos);
}

// ---- token rules: min_length, disable_unk, no_repeat_ngram_size, repetition_penalty ---------------

// Whether some n-gram appears twice in `tokens`.
bool repeats_an_ngram(const std::vector<int64_t>& tokens, size_t n) {
  std::set<std::vector<int64_t>> seen;
  for (size_t i = 0; i + n <= tokens.size(); ++i)
    if (!seen.insert(std::vector<int64_t>(tokens.begin() + i, tokens.begin() + i + n)).second) return true;
  return false;
}

TEST(TokenRules, MinLengthHoldsTheEndBackButTheLengthLimitWins) {
  auto ends_at_once = [](int64_t, const std::vector<int64_t>&) { return dist(0.06, 0.04, 0.9); };
  SearchOptions o = options(1);
  o.min_length = 3;
  for (int64_t beam : {1, 2}) {
    o.beam_size = beam;
    ScriptedDecoder plain(ends_at_once), ruled(ends_at_once);
    EXPECT_TRUE(search(plain, sources({7}), options(beam))[0][0].tokens.empty());
    const auto h = search(ruled, sources({7}), o)[0][0];
    EXPECT_EQ(h.tokens, (std::vector<int64_t>{A, A, A})) << "beam " << beam;
    // The chosen tokens keep the model's log-probabilities: `score` would give the same.
    EXPECT_NEAR(h.log_prob, 3 * std::log(0.06) + std::log(0.9), 1e-5);
    SearchOptions tight = o;
    tight.max_len_b = 2;  // one token, then eos is forced
    ScriptedDecoder limited(ends_at_once);
    EXPECT_EQ(search(limited, sources({7}), tight)[0][0].tokens, std::vector<int64_t>{A}) << "beam " << beam;
  }
}

TEST(TokenRules, DisableUnkNeverOutputsTheUnknownPiece) {
  auto likes_unk = [](int64_t, const std::vector<int64_t>& prefix) {
    return prefix.size() < 2 ? std::vector<double>{0, 0.7, 0, 0.05, 0.25, 0} : dist(0, 0, 1);
  };
  SearchOptions o = options(1);
  o.disable_unk = true;
  for (int64_t beam : {1, 3}) {
    o.beam_size = beam;
    ScriptedDecoder plain(likes_unk), ruled(likes_unk);
    EXPECT_EQ(search(plain, sources({7}), options(beam))[0][0].tokens, (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(search(ruled, sources({7}), o)[0][0].tokens, (std::vector<int64_t>{A, A})) << "beam " << beam;
  }
}

// "a b a b a b": each token prefers the other one next.
std::vector<double> alternates(int64_t, const std::vector<int64_t>& prefix) {
  if (prefix.size() >= 6) return dist(0, 0, 1);
  if (!prefix.empty() && prefix.back() == A) return dist(0.3, 0.6, 0.1);
  return dist(0.6, 0.3, 0.1);
}

TEST(TokenRules, NoRepeatNgramSizeLeavesNoNgramTwiceInAnyHypothesis) {
  ScriptedDecoder plain(alternates);
  EXPECT_EQ(greedy_search(plain, sources({7}), options(1))[0][0].tokens, (std::vector<int64_t>{A, B, A, B, A, B}));
  for (int64_t n : {1, 2, 3}) {
    SearchOptions o = options(1);
    o.no_repeat_ngram_size = n;
    ScriptedDecoder greedy(alternates);
    const auto g = greedy_search(greedy, sources({7}), o)[0][0].tokens;
    // Greedy by hand for bigrams: a, b, a (b a is new), then a (a b was seen), then only eos.
    if (n == 2) {
      EXPECT_EQ(g, (std::vector<int64_t>{A, B, A, A}));
    }
    EXPECT_FALSE(repeats_an_ngram(g, static_cast<size_t>(n))) << "greedy, n " << n;
    o.beam_size = o.nbest = 3;
    ScriptedDecoder beam(alternates);
    const auto nbest = beam_search(beam, sources({7}), o);
    ASSERT_EQ(nbest[0].size(), 3u);
    for (const auto& h : nbest[0])
      EXPECT_FALSE(repeats_an_ngram(h.tokens, static_cast<size_t>(n))) << "beam, n " << n;
  }
}

TEST(TokenRules, RepetitionPenaltyScalesTheLogProbabilityOfARepeatedToken) {
  auto again = [](int64_t, const std::vector<int64_t>& prefix) {
    if (prefix.empty()) return dist(0.9, 0.1, 0.0);
    if (prefix.size() == 1) return dist(0.5, 0.4, 0.1);
    return dist(0, 0, 1);
  };
  SearchOptions o = options(1);
  o.repetition_penalty = 2.0;  // a again: 2 log 0.5 = -1.39 < log 0.4 = -0.92
  ScriptedDecoder plain(again), strong(again), mild(again);
  EXPECT_EQ(greedy_search(plain, sources({7}), options(1))[0][0].tokens, (std::vector<int64_t>{A, A}));
  const auto h = greedy_search(strong, sources({7}), o)[0][0];
  EXPECT_EQ(h.tokens, (std::vector<int64_t>{A, B}));
  EXPECT_NEAR(h.log_prob, std::log(0.9) + std::log(0.4), 1e-5);
  o.repetition_penalty = 1.2;  // 1.2 log 0.5 = -0.83 > -0.92: a again, its score the penalised one
  const auto m = greedy_search(mild, sources({7}), o)[0][0];
  EXPECT_EQ(m.tokens, (std::vector<int64_t>{A, A}));
  EXPECT_NEAR(m.log_prob, std::log(0.9) + 1.2 * std::log(0.5), 1e-5);
  o.beam_size = 2;
  o.repetition_penalty = 2.0;
  ScriptedDecoder beam(again);
  EXPECT_EQ(beam_search(beam, sources({7}), o)[0][0].tokens, (std::vector<int64_t>{A, B}));
}

TEST(TokenRules, APrefixIsForcedWhateverTheRulesAndTheRulesHoldAfterIt) {
  SearchOptions o = options(1);
  o.no_repeat_ngram_size = 1;  // no token twice
  for (int64_t beam : {1, 2}) {
    o.beam_size = beam;
    ScriptedDecoder decoder(alternates);
    const auto h = search(decoder, sources({7}), o, prefixes({{A, A}}))[0][0];
    // After the prefix a is banned: greedy takes b (0.6), then eos (0.1), the only token left; the
    // beam finds eos at once (0.1) more probable than b then eos (0.06).
    EXPECT_EQ(h.tokens, beam == 1 ? (std::vector<int64_t>{A, A, B}) : (std::vector<int64_t>{A, A})) << "beam " << beam;
  }
}

TEST(TokenRules, StreamRowsFollowTheirOwnRules) {
  ScriptedDecoder decoder(alternates, /*joinable=*/true);
  GreedyStream stream(decoder);
  stream.join(sources({7}), {0}, options(1));
  stream.step();
  SearchOptions ruled = options(1);
  ruled.no_repeat_ngram_size = 2;
  stream.join(sources({7}), {1}, ruled);
  std::map<int64_t, Hypothesis> done;
  while (!stream.empty()) {
    stream.step();
    for (auto& [tag, h] : stream.take_finished()) done[tag] = h;
  }
  EXPECT_EQ(done[0].tokens, (std::vector<int64_t>{A, B, A, B, A, B}));
  EXPECT_EQ(done[1].tokens, (std::vector<int64_t>{A, B, A, A}));
}

TEST(TokenRules, BadSettingsAreRefusedByName) {
  SearchOptions o = options(1);
  EXPECT_EQ(search_rules_problem(o, true, "--min-len"), "");
  o.min_length = -1;
  EXPECT_NE(search_rules_problem(o, true, "--min-len").find("--min-len"), std::string::npos);
  o = options(1);
  o.no_repeat_ngram_size = -2;
  EXPECT_NE(search_problem(o, false).find("no_repeat_ngram_size"), std::string::npos);
  for (double bad : {0.0, -1.0, std::nan(""), 1e9}) {
    o = options(1);
    o.repetition_penalty = bad;
    EXPECT_NE(search_problem(o, true).find("--repetition-penalty"), std::string::npos) << bad;
  }
}

// ---- steering: sampling -----------------------------------------------------------------------

TEST(Sampling, DrawsTokensWithTheirProbabilitiesWithinTopKAndTopP) {
  const std::vector<float> lp{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SearchOptions o;
  auto frequencies = [&](const SearchOptions& options) {
    std::vector<double> f(lp.size(), 0.0);
    const int n = 20000;
    for (int i = 0; i < n; ++i)
      f[static_cast<size_t>(sample_token(lp.data(), 4, options, sampling_uniform(11, 0, i)))] += 1.0 / n;
    return f;
  };
  o.sampling_topk = 0;  // the whole distribution
  auto f = frequencies(o);
  for (size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(f[i], std::exp(lp[i]), 0.015) << "token " << i;
  o.sampling_topk = 2;  // renormalised over the best two: 0.625 / 0.375
  f = frequencies(o);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  EXPECT_EQ(f[2] + f[3], 0.0);
  o.sampling_topk = 0;
  o.sampling_topp = 0.7;  // the smallest head holding 70%: the first two
  f = frequencies(o);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  EXPECT_EQ(f[2] + f[3], 0.0);
  o.sampling_topp = 1.0;
  o.sampling_temperature = 0.05;  // nearly the argmax
  f = frequencies(o);
  EXPECT_GT(f[0], 0.99);
}

TEST(Sampling, TheSameSeedAndStreamGiveTheSameDrawsWhateverTheBatch) {
  auto even = [](int64_t, const std::vector<int64_t>& prefix) {
    return prefix.size() < 6 ? dist(0.45, 0.45, 0.1) : dist(0.0, 0.0, 1.0);
  };
  SearchOptions o = options(1);
  o.sampling_topk = 0;
  o.seed = 4;
  auto run = [&](const std::vector<int64_t>& streams) {
    ScriptedDecoder decoder(even);
    Steering steering;
    for (int64_t s : streams) steering.push_back(SentenceSteering{{}, {}, s});
    std::vector<int64_t> ids(streams.size(), 7);
    std::vector<std::vector<int64_t>> out;
    for (auto& hyps : search(decoder, sources(ids), o, steering)) out.push_back(hyps[0].tokens);
    return out;
  };
  const auto batch = run({0, 1, 2, 3});
  EXPECT_EQ(run({2})[0], batch[2]);
  EXPECT_EQ(run({3, 0})[1], batch[0]);
  std::set<std::vector<int64_t>> distinct(batch.begin(), batch.end());
  EXPECT_GT(distinct.size(), 1u) << "four streams drew the same sentence";
  o.seed = 5;
  EXPECT_NE(run({0, 1, 2, 3}), batch);
}

TEST(Sampling, BadSettingsAreRefused) {
  ScriptedDecoder decoder(garden_path);
  SearchOptions o = options(2);
  o.sampling_topk = 5;
  EXPECT_THROW(search(decoder, sources({7}), o), std::invalid_argument);  // beam > 1
  o = options(1);
  o.sampling_topp = 0.5;  // without sampling
  EXPECT_THROW(search(decoder, sources({7}), o), std::invalid_argument);
  o.sampling_topk = 0;
  o.sampling_topp = 1.5;
  EXPECT_THROW(search(decoder, sources({7}), o), std::invalid_argument);
}

// ---- steering: terminology constraints --------------------------------------------------------

TEST(Constraints, AStateFollowsPhrasesAndOwesABrokenOneAgain) {
  const Phrases phrases{{A, B}, {B}};
  ConstraintState state(&phrases);
  EXPECT_EQ(state.total(), 3);
  EXPECT_EQ(state.allowed(), (std::vector<int64_t>{A, B}));
  state = state.advance(A);  // "a b" begun
  EXPECT_EQ(state.remaining(), 2);
  EXPECT_EQ(state.allowed(), (std::vector<int64_t>{B}));
  state = state.advance(A);  // broken off, and begun again by the same token
  EXPECT_EQ(state.remaining(), 2);
  state = state.advance(EOS);  // broken off
  EXPECT_EQ(state.remaining(), 3);
  state = state.advance(A).advance(B);
  EXPECT_EQ(state.remaining(), 1);
  EXPECT_EQ(state.allowed(), (std::vector<int64_t>{B}));
  state = state.advance(B);
  EXPECT_TRUE(state.complete());
  EXPECT_TRUE(state.allowed().empty());
  EXPECT_TRUE(ConstraintState().complete());
  const Phrases empty_phrase{{}};
  EXPECT_THROW(ConstraintState{&empty_phrase}, std::invalid_argument);
}

TEST(Constraints, BanksShareTheBeamAndPassDownWhatTheyCannotFill) {
  EXPECT_EQ(bank_sizes(2, 5, {9, 9, 9}), (std::vector<int64_t>{1, 1, 3}));
  EXPECT_EQ(bank_sizes(2, 5, {9, 9, 0}), (std::vector<int64_t>{1, 4, 0}));
  EXPECT_EQ(bank_sizes(2, 5, {9, 1, 1}), (std::vector<int64_t>{3, 1, 1}));
  EXPECT_EQ(bank_sizes(4, 2, {9, 9, 9, 9, 9}), (std::vector<int64_t>{0, 0, 0, 0, 2}));
  EXPECT_THROW(bank_sizes(2, 5, {1, 1}), std::invalid_argument);
}

TEST(Constraints, AllocationKeepsEachBanksBestThenFillsTheBeam) {
  // One constraint token: banks 0 and 1 get one slot each of 2 (the remainder to bank 1).
  const std::vector<BankCandidate> pool{{-1.0f, 0, A, 0}, {-2.0f, 1, A, 0}, {-3.0f, 0, B, 1}, {-4.0f, 1, B, 1}};
  auto kept = allocate_beam(pool, 1, 2);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].score, -1.0f);  // best first
  EXPECT_EQ(kept[1].score, -3.0f);  // bank 1's best, over bank 0's second
  // Bank 1 empty: its slot goes to bank 0.
  kept = allocate_beam({pool[0], pool[1]}, 1, 2);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[1].score, -2.0f);
  // Fewer candidates than slots: all of them.
  EXPECT_EQ(allocate_beam({pool[2]}, 1, 5).size(), 1u);
}

Steering constrained(const std::vector<Phrases>& per_sentence) {
  Steering steering;
  for (const auto& c : per_sentence) {
    steering.emplace_back();
    steering.back().constraints = c;
  }
  return steering;
}

bool holds(const std::vector<int64_t>& tokens, const std::vector<int64_t>& phrase) {
  return std::search(tokens.begin(), tokens.end(), phrase.begin(), phrase.end()) != tokens.end();
}

// "a" first, then the end; "b" is unlikely everywhere.
std::vector<double> prefers_a(int64_t, const std::vector<int64_t>& prefix) {
  return prefix.empty() ? dist(0.7, 0.1, 0.2) : dist(0.1, 0.1, 0.8);
}

TEST(Constraints, EveryPhraseAppearsAndTheOthersInTheBatchAreUntouched) {
  for (int64_t beam : {1, 2, 5}) {
    SCOPED_TRACE("beam " + std::to_string(beam));
    ScriptedDecoder free_decoder(prefers_a);
    const auto alone = search(free_decoder, sources({7}), options(beam));
    EXPECT_EQ(alone[0][0].tokens, (std::vector<int64_t>{A}));
    ScriptedDecoder decoder(prefers_a);
    const auto result =
        search(decoder, sources({7, 7, 7, 7}), options(beam), constrained({{{B}}, {{B, A}}, {}, {{B}, {B}, {A, A, B}}}));
    EXPECT_EQ(result[0][0].tokens, (std::vector<int64_t>{B}));
    EXPECT_NEAR(result[0][0].log_prob, std::log(0.1) + std::log(0.8), 1e-5);
    EXPECT_EQ(result[1][0].tokens, (std::vector<int64_t>{B, A}));
    EXPECT_EQ(result[2][0].tokens, alone[0][0].tokens);
    EXPECT_NEAR(result[2][0].log_prob, alone[0][0].log_prob, 1e-6);
    const auto& three = result[3][0].tokens;
    EXPECT_TRUE(holds(three, {A, A, B})) << "beam " << beam;
    EXPECT_GE(std::count(three.begin(), three.end(), B), 3);
  }
}

TEST(Constraints, PhrasesLongerThanTheLengthLimitStillFitAndFollowAPrefix) {
  SearchOptions o = options(3);
  o.max_len_b = 1;  // room for eos only
  ScriptedDecoder decoder(prefers_a);
  Steering steering = constrained({{{B, B}, {A}}});
  steering[0].prefix = {A};
  const auto result = search(decoder, sources({7}), o, steering);
  const auto& tokens = result[0][0].tokens;
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens[0], A);
  EXPECT_TRUE(holds(tokens, {B, B}));
  EXPECT_LE(tokens.size(), 1u + 3u);  // the prefix and the constraints' tokens
}

TEST(Constraints, ARealModelsOutputHoldsThemInEveryRowOfABatch) {
  torch::manual_seed(3);
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 40;
  Transformer model(c);
  model->eval();
  TransformerDecoder decoder(model);
  auto src = torch::randint(4, 40, {3, 6}, torch::kLong);
  SearchOptions o = options(4);
  o.max_len_b = 8;
  const Steering steering = constrained({{{17, 18}}, {{30}, {31, 32, 33}}, {{5}}});
  const auto result = search(decoder, src, o, steering);
  for (size_t i = 0; i < steering.size(); ++i)
    for (const auto& phrase : steering[i].constraints) EXPECT_TRUE(holds(result[i][0].tokens, phrase)) << i;
}

TEST(Constraints, SamplingIsRefused) {
  ScriptedDecoder decoder(prefers_a);
  SearchOptions o = options(1);
  o.sampling_topk = 0;
  EXPECT_THROW(search(decoder, sources({7}), o, constrained({{{B}}})), std::invalid_argument);
}

}  // namespace
}  // namespace torchmt
