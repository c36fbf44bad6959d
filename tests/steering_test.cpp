// Steering the search through the Translator and the CLI: target prefixes, sampling's
// reproducibility, and the output vocabulary shortlist (data/shortlist.h).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "data_test_support.h"
#include "data/parallel_corpus.h"
#include "data/shortlist.h"
#include "data/text_file.h"
#include "decoding/output_languages.h"
#include "decoding/output_restriction.h"
#include "decoding/transformer_decoder.h"
#include "torchmt/decoding/translator.h"

namespace torchmt {
namespace {

using test::random_translator;
using test::sample_lines;


const Shortlist& sample_shortlist() {
  static const Shortlist shortlist = [] {
    CorpusOptions options;
    auto corpus = load_parallel_corpus(test::sample_de(), test::sample_en(), test::sample_tokenizer(),
                                       test::sample_tokenizer(), options);
    ShortlistOptions s;
    s.per_source = 5;
    s.frequent = 10;
    return Shortlist::build(corpus, test::sample_tokenizer(), test::sample_tokenizer(), s);
  }();
  return shortlist;
}

TEST(TargetPrefix, EveryTranslationStartsWithItsPrefixGreedyAndBeam) {
  auto translator = random_translator();
  const auto lines = sample_lines(6);
  const std::vector<std::string> prefix_texts{"The man", "", "Two", "A dog is", "Yes", "In the"};
  std::vector<LineSteering> steering;
  for (const auto& p : prefix_texts) steering.push_back(LineSteering{p});
  for (int64_t beam : {1, 4}) {
    TranslationOptions options;
    options.search.beam_size = beam;
    options.batch_size = 4;
    const auto out = translator.translate(lines, options, {}, steering);
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& prefix_ids = translator.tgt_tokenizer().encode(prefix_texts[i]);
      const auto& tokens = out[i].hypotheses.at(0).tokens;
      ASSERT_GE(tokens.size(), prefix_ids.size());
      EXPECT_TRUE(std::equal(prefix_ids.begin(), prefix_ids.end(), tokens.begin())) << "line " << i << " beam " << beam;
      EXPECT_EQ(out[i].texts[0].rfind(prefix_texts[i], 0), 0u) << out[i].texts[0];
    }
  }
  EXPECT_THROW(translator.translate(lines, TranslationOptions{}, {}, {LineSteering{"x"}}), std::invalid_argument);
}

TEST(Sampling, TheSameSeedGivesTheSameTranslationsOnAnyNumberOfWorkersAndBatches) {
  auto translator = random_translator();
  const auto lines = sample_lines(10);
  TranslationOptions options;
  options.search.sampling_topk = 0;
  options.search.seed = 7;
  options.workers = 1;
  options.batch_size = 10;
  const auto one = translator.translate_text(lines, options);
  options.workers = 2;
  options.batch_size = 3;
  EXPECT_EQ(translator.translate_text(lines, options), one);
  // Windows of the input (translate's --buffer-size): the lines keep their numbers.
  options.first_line = 4;
  const auto tail = translator.translate_text(std::vector<std::string>(lines.begin() + 4, lines.end()), options);
  EXPECT_EQ(tail, std::vector<std::string>(one.begin() + 4, one.end()));
  options.first_line = 0;
  options.search.seed = 8;
  EXPECT_NE(translator.translate_text(lines, options), one);
}

TEST(Shortlist, ListsCandidatesRoundTripsAndRefusesAnotherVocabulary) {
  const Shortlist& shortlist = sample_shortlist();
  const auto ids = test::sample_tokenizer().encode(sample_lines(1)[0]);
  const auto candidates = shortlist.candidates(ids, {42});
  EXPECT_TRUE(std::is_sorted(candidates.begin(), candidates.end()));
  EXPECT_TRUE(std::binary_search(candidates.begin(), candidates.end(), int64_t{3}));   // eos
  EXPECT_TRUE(std::binary_search(candidates.begin(), candidates.end(), int64_t{42}));  // the extra
  EXPECT_LT(candidates.size(), static_cast<size_t>(test::sample_tokenizer().vocab_size()));
  EXPECT_GT(candidates.size(), shortlist.candidates({}).size());  // the source's own

  test::TempDir dir;
  shortlist.save(dir.file("s.tsv"));
  const auto loaded = Shortlist::load(dir.file("s.tsv"), test::sample_tokenizer(), test::sample_tokenizer());
  EXPECT_EQ(loaded.candidates(ids), shortlist.candidates(ids));

  auto expect_error = [&](const std::string& text, const std::string& needle) {
    test::write_text(dir.file("bad.tsv"), text);
    try {
      Shortlist::load(dir.file("bad.tsv"), test::sample_tokenizer(), test::sample_tokenizer());
      ADD_FAILURE() << "loaded: " << text.substr(0, 80);
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  const std::string good = test::read_text(dir.file("s.tsv"));
  expect_error("hello\n", "not a torchmt shortlist");
  std::string other = good;
  other.replace(other.find("source_vocabulary ") + 18, 4, "0000");
  other.erase(other.rfind("# torchmt-crc32c:"));  // edited by hand: its checksum line deleted
  expect_error(other, "another source vocabulary");
  // Lines added by hand (the checksum line deleted, as its error says) before the "end" line.
  const std::string body = good.substr(0, good.rfind("end "));
  const std::string end_line = good.substr(body.size(), good.find('\n', body.size()) + 1 - body.size());
  EXPECT_EQ(end_line.rfind("end ", 0), 0u);
  expect_error(body + "5\t1 2 999999\n" + end_line, "outside the vocabulary");
  expect_error(body + "x\t1\n" + end_line, "line ");
  expect_error(good.substr(0, good.find("\nfrequent ") + 1), "missing frequent");
  // Damage: a truncation anywhere in the lists (a line's tail is a shorter list), a flipped
  // digit, a list too many for the "end" count, text after it, the format without either.
  for (const size_t cut : {body.size() - 3, body.size()}) expect_error(good.substr(0, cut), "truncated");
  expect_error(good.substr(0, good.size() - 10), "checksum line is cut short");
  std::string flipped = good;
  flipped[body.size() - 2] = flipped[body.size() - 2] == '1' ? '2' : '1';
  expect_error(flipped, "checksum mismatch");
  expect_error(body + "7\t1\n" + end_line, "but the file lists");
  expect_error(body + end_line + "7\t1\n", "after the 'end' line");
  std::string old_format = body;
  old_format.replace(0, old_format.find('\n'), "torchmt-shortlist 1");
  expect_error(old_format, "rebuild it");
  test::write_text(dir.file("edited.tsv"), body + end_line);  // no checksum line: loads
  EXPECT_EQ(Shortlist::load(dir.file("edited.tsv"), test::sample_tokenizer(), test::sample_tokenizer()).candidates(ids),
            shortlist.candidates(ids));
}

// A row may produce only its candidates, its log-probabilities are the full model's
// renormalised over them, and its translation does not depend on what shares its batch.
TEST(Shortlist, RestrictsEachSentenceToItsCandidatesWhateverItsBatch) {
  auto translator = random_translator();
  translator.set_shortlist(std::make_shared<const Shortlist>(sample_shortlist()));
  const auto lines = sample_lines(8);
  for (int64_t beam : {1, 3}) {
    TranslationOptions options;
    options.search.beam_size = beam;
    options.batch_size = 8;
    const auto together = translator.translate(lines, options);
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto allowed = sample_shortlist().candidates(translator.encode_source(lines[i]));
      for (int64_t t : together[i].hypotheses.at(0).tokens)
        EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), t)) << "line " << i << " token " << t;
      options.batch_size = 1;
      EXPECT_EQ(translator.translate_text({lines[i]}, options)[0], together[i].texts[0]) << "line " << i;
      options.batch_size = 8;
    }
  }
  // The decoder's step: the full model's log-probabilities renormalised over the row's list.
  torch::NoGradGuard no_grad;
  translator.model()->eval();
  const auto source_ids = translator.encode_source(lines[0]);
  const auto src = translator.source_batch({&source_ids});  // [1, S]
  TransformerDecoder full(translator.model()), restricted(translator.model());
  full.start(src);
  restricted.start(src);
  const auto list = sample_shortlist().candidates(translator.encode_source(lines[0]));
  restricted.restrict_output({&list});
  const auto bos = torch::full({1}, 2, torch::kLong);
  const auto all = full.step(bos);              // [1, V]
  const auto some = restricted.step(bos);       // [1, U]
  const auto columns = restricted.output_columns();
  ASSERT_TRUE(columns.defined());
  const auto expected = torch::log_softmax(all.index_select(1, columns), -1);
  EXPECT_TRUE(torch::allclose(some, expected, 1e-5, 1e-5));
}

// The per-step mask over the union's columns is made once and then follows the rows through
// selects, expansions and joins: it always equals the one made afresh from the rows' lists.
TEST(Shortlist, TheStepMaskFollowsTheRowsThroughSelectsExpansionsAndJoins) {
  OutputRestriction r;
  const std::vector<int64_t> a{1, 4, 6}, b{2, 4}, c{7};
  auto expect_fresh = [&](const char* after) {
    const auto fresh = r.allowed().index_select(1, r.columns()).logical_not();  // [N, U]
    EXPECT_TRUE(torch::equal(r.blocked_columns(), fresh)) << "after " << after;
  };
  r.restrict_last({&a, &b}, 2, 9, torch::kCPU);
  EXPECT_TRUE(torch::equal(r.columns(), torch::tensor({1, 2, 4, 6}, torch::kLong)));
  EXPECT_TRUE(torch::equal(r.blocked_columns()[1], torch::tensor({true, false, false, true})));
  r.select(torch::tensor({1, 0, 1}, torch::kLong));
  expect_fresh("select");
  r.expand(2);
  expect_fresh("expand");
  ASSERT_EQ(r.blocked_columns().size(0), 6);
  r.add_rows(1);  // unrestricted: every column
  expect_fresh("add_rows");
  r.restrict_last({&c}, 7, 9, torch::kCPU);
  expect_fresh("restrict_last");
  EXPECT_TRUE(torch::equal(r.columns(), torch::tensor({1, 2, 4, 6, 7}, torch::kLong)));
  EXPECT_TRUE(torch::equal(r.blocked_columns()[6], torch::tensor({true, true, true, true, false})));
  r.reset();
  EXPECT_FALSE(r.active());

  // One list for every row: one mask row and nothing blocked within its columns, until a joined
  // row or another list parts the rows; then the per-row mask is the one made afresh.
  const std::vector<int64_t> a2 = a;
  r.restrict_last({&a, &a2}, 2, 9, torch::kCPU);
  EXPECT_TRUE(r.shared());
  EXPECT_EQ(r.allowed().size(0), 1);
  EXPECT_TRUE(torch::equal(r.columns(), torch::tensor({1, 4, 6}, torch::kLong)));
  EXPECT_FALSE(r.blocked_columns().defined());
  r.expand(3);
  r.select(torch::tensor({5, 0, 2, 2}, torch::kLong));
  EXPECT_TRUE(r.shared());
  const auto scores = torch::zeros({4, 9});
  const auto masked = r.apply(scores);  // [4, 9]: -inf outside the list, log(1/3) within
  EXPECT_TRUE(torch::isinf(masked.index_select(1, torch::tensor({0, 2, 3, 5, 7, 8}, torch::kLong))).all().item<bool>());
  EXPECT_TRUE(torch::allclose(masked.index_select(1, r.columns()), torch::full({4, 3}, -std::log(3.0))));
  r.add_rows(1);
  EXPECT_FALSE(r.shared());
  ASSERT_EQ(r.allowed().size(0), 5);
  expect_fresh("add_rows after one list");
  EXPECT_TRUE(r.allowed()[4].all().item<bool>());
  EXPECT_TRUE(torch::equal(r.allowed()[3], r.allowed()[0]));
  r.restrict_last({&a2}, 5, 9, torch::kCPU);  // the joined row takes the others' list: one list again
  EXPECT_TRUE(r.shared());
  EXPECT_EQ(r.allowed().size(0), 1);
  EXPECT_TRUE(torch::equal(r.columns(), torch::tensor({1, 4, 6}, torch::kLong)));
  r.reset();
  r.restrict_last({&a, &b}, 2, 9, torch::kCPU);
  EXPECT_FALSE(r.shared());  // two lists
  r.reset();
  r.restrict_last({&a}, 2, 9, torch::kCPU);
  EXPECT_FALSE(r.shared());  // a row without a list
}

// A model whose output layer has columns closed (train --output-columns corpus) computes only
// its open ones: the translations and scores of the whole layer, which gives the closed ones no
// probability, greedy and beam, whatever shares a batch.
TEST(OutputLanguages, AModelWithClosedColumnsTranslatesOverItsOpenOnesAsOverTheWholeLayer) {
  Translator whole = random_translator();
  const ModelConfig& c = whole.config();
  torch::manual_seed(3);
  at::Tensor open = torch::rand({c.tgt_vocab_size}) < 0.5;  // [V] bool
  for (int64_t id : {c.pad_id, c.bos_id, c.eos_id}) open[id] = true;
  whole.model()->close_output_columns(open);  // `whole` read the columns when made: it computes all
  Translator restricted = whole;
  restricted.set_languages(whole.languages());
  ASSERT_FALSE(whole.restricts_output());
  ASSERT_TRUE(restricted.restricts_output());
  test::expect_same_translations(whole, restricted, sample_lines(12), 5, 1e-4, [&](const Hypothesis& h) {
    for (int64_t t : h.tokens) EXPECT_TRUE(open[t].item<bool>()) << "closed piece " << t;
  });
}

// A --both-directions model's way for a sentence: the language its pieces belong to alone, by
// count; a tie leaves every column. A shortlist narrows the language's columns, and a prefix's or
// constraint's pieces stay whatever their language.
TEST(OutputLanguages, ReadsTheWayFromTheSourcesOwnPiecesAndKeepsWhatTheOutputMustHold) {
  ModelLanguages languages;
  languages.both_directions = true;
  languages.target_columns = {0, 1, 2, 5, 6};
  languages.source_columns = {0, 1, 2, 7, 8};
  const auto ways = OutputLanguages::of(languages, 10);
  ASSERT_TRUE(ways);
  ASSERT_NE(ways->columns_for({7, 8, 5, 3, 2}), nullptr);
  EXPECT_EQ(*ways->columns_for({7, 8, 5, 3, 2}), languages.target_columns);  // two source-language pieces to one
  ASSERT_NE(ways->columns_for({5, 6, 7}), nullptr);
  EXPECT_EQ(*ways->columns_for({5, 6, 7}), languages.source_columns);
  EXPECT_EQ(ways->columns_for({0, 1, 3, 7, 5}), nullptr);
  EXPECT_EQ(ways->columns_for({}), nullptr);

  EXPECT_EQ(within_language({}, languages.target_columns, {9, 3, 9}), (std::vector<int64_t>{0, 1, 2, 3, 5, 6, 9}));
  EXPECT_EQ(within_language({1, 5, 8, 9}, languages.target_columns, {9}), (std::vector<int64_t>{1, 5, 9}));

  ModelLanguages one_way = languages;
  one_way.both_directions = false;
  EXPECT_FALSE(OutputLanguages::of(one_way, 10));
  ModelLanguages unrecorded = languages;
  unrecorded.source_columns.clear();
  EXPECT_FALSE(OutputLanguages::of(unrecorded, 10));
  ModelLanguages unsorted = languages;
  unsorted.target_columns = {0, 2, 1};
  EXPECT_THROW(OutputLanguages::of(unsorted, 10), std::invalid_argument);
  ModelLanguages outside = languages;
  outside.source_columns = {0, 10};
  EXPECT_THROW(OutputLanguages::of(outside, 10), std::invalid_argument);
  Translator translator = random_translator();
  outside.source_columns = {0, translator.config().tgt_vocab_size};
  EXPECT_THROW(translator.set_languages(outside), std::invalid_argument);  // not the model's columns
}

}  // namespace
}  // namespace torchmt
