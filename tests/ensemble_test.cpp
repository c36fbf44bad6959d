// Ensembles (-m a.pt -m b.pt): the step is the weighted mean of the members' log-probabilities,
// renormalised; every search feature runs over it; a hypothesis scores as the search scored it;
// an ensemble of a model with itself translates as the model; models of other vocabularies and
// wrong weights are refused in one line.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include "data_test_support.h"
#include "test_support.h"
#include "decoding/ensemble_decoder.h"
#include "decoding/transformer_decoder.h"
#include "torchmt/decoding/translation_options.h"
#include "io/checkpoint.h"
#include "torchmt/loading/model_loader.h"
#include "model/linear.h"

namespace torchmt {
namespace {

using test::tiny_checkpoint;

// A second random tiny model of the sample vocabulary (another seed than tiny_checkpoint's).
const std::string& other_checkpoint() {
  static test::TempDir dir;
  static const std::string path = [] {
    ModelConfig c = ModelConfig::preset("tiny");
    c.src_vocab_size = c.tgt_vocab_size = test::sample_tokenizer().vocab_size();
    c.max_positions = 64;
    torch::manual_seed(11);
    Transformer model(c);
    CheckpointMeta meta;
    meta.model = c;
    meta.src_spm_model = meta.tgt_spm_model = test::sample_tokenizer().serialized();
    meta.src_spm_checksum = meta.tgt_spm_checksum = test::sample_tokenizer().checksum();
    save_checkpoint(dir.file("other.pt"), model, nullptr, meta);
    return dir.file("other.pt");
  }();
  return path;
}

// Every step's log-probabilities unscreened, so that a model and its ensemble compute the same.
TranslatorConfig unscreened(std::vector<std::string> models) {
  TranslatorConfig config;
  config.models = std::move(models);
  config.device = "cpu";
  config.dtype = "fp32";
  Runtime runtime = Runtime::from_environment();
  runtime.screened_argmax = false;
  runtime.screened_beam = false;
  config.runtime = runtime;
  return config;
}

// Members as load_translator prepares them (packed, the output projection screened): the generic
// mean of the members' steps and the stacked projection (one layer over their hidden states) give
// the same distribution; its greedy token is the step's argmax, its beam entries the step's.
TEST(Ensemble, StepIsTheRenormalisedWeightedMeanThroughSelects) {
  TranslatorConfig config;
  config.device = "cpu";
  config.dtype = "fp32";
  config.models = {tiny_checkpoint()};
  Translator a = load_translator(config);
  config.models = {other_checkpoint()};
  Translator b = load_translator(config);
  c10::InferenceMode inference;  // as a search runs (the models were loaded outside it)
  const auto lines = test::sample_lines(3);
  std::vector<std::vector<int64_t>> ids;
  for (const auto& l : lines) ids.push_back(a.encode_source(l));
  const auto src = a.source_batch({&ids[0], &ids[1], &ids[2]});  // [3, S]
  // Shortlists: sentence 0 and 2 may produce only some tokens, sentence 1 any.
  std::vector<int64_t> few, more;
  for (int64_t t = 3; t < 40; ++t) few.push_back(t);
  for (int64_t t = 3; t < 120; t += 2) more.push_back(t);
  const std::vector<int64_t> any;
  for (bool stacked : {false, true})
    for (int lists : {0, 1, 2}) {  // none, one per sentence, one list for every sentence
      const bool shortlist = lists > 0;
      const std::string where = std::string(stacked ? "stacked" : "generic") +
                                (lists == 1 ? ", shortlists" : lists == 2 ? ", one shortlist" : "");
      auto da = a.make_decoder(true), db = b.make_decoder(true);
      std::vector<std::unique_ptr<IncrementalDecoder>> members;
      members.push_back(a.make_decoder(true));
      members.push_back(b.make_decoder(true));
      EnsembleDecoder ensemble(std::move(members), {3.0, 1.0},
                               stacked ? stack_linear_inputs({a.model()->fc_out, b.model()->fc_out}, {0.75, 0.25})
                                       : nullptr);
      for (IncrementalDecoder* d : {da.get(), db.get(), static_cast<IncrementalDecoder*>(&ensemble)}) {
        d->start(src);
        if (lists == 1) d->restrict_output({&few, &any, &more});
        if (lists == 2) d->restrict_output({&more, &more, &more});
        d->expand_rows(3, 2);  // [6] rows: two beams per sentence
      }
      if (shortlist) {
        ASSERT_TRUE(torch::equal(ensemble.output_columns(), da->output_columns()));
      }
      auto tokens = torch::full({6}, a.config().bos_id, torch::kLong);
      for (int step = 0; step < 4; ++step) {
        const auto expected = torch::log_softmax(0.75 * da->step(tokens) + 0.25 * db->step(tokens), -1);  // [6, V]
        at::Tensor got;
        if (step == 1 && lists != 1) {
          // The search's own steps: greedy's token and beam's entries, as the step would give them.
          const auto greedy = ensemble.greedy_tokens(tokens);
          const auto best = std::get<1>(expected.max(-1));  // [6] columns
          EXPECT_TRUE(torch::equal(greedy, shortlist ? da->output_columns().index_select(0, best) : best)) << where;
          got = expected;
        } else if (step == 2 && lists != 1) {
          const auto top = ensemble.step_top_k(tokens, 3, {5, 7});
          const auto want = IncrementalDecoder::top_k_of(expected, 3, {5, 7});
          EXPECT_TRUE(torch::allclose(top.values, want.values, 1e-3, 1e-3)) << where;
          EXPECT_TRUE(torch::allclose(top.extra, want.extra, 1e-3, 1e-3)) << where;
          got = expected;
        } else {
          got = ensemble.step(tokens);
          ASSERT_EQ(got.sizes(), expected.sizes());
          EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-5)) << where << ", step " << step;
          EXPECT_NEAR(got.exp().sum(-1).min().item<double>(), 1.0, 1e-4) << "a distribution";
        }
        // Beam reordering within sentences, a sentence leaving the batch, reordering again.
        const std::vector<at::Tensor> indices = {torch::tensor({1, 0, 3, 3, 4, 5}), torch::tensor({0, 1, 4, 5}),
                                                 torch::tensor({1, 1, 2, 3}), torch::tensor({0, 1, 3, 2})};
        const auto& index = indices[static_cast<size_t>(step)];
        for (IncrementalDecoder* d : {da.get(), db.get(), static_cast<IncrementalDecoder*>(&ensemble)})
          step % 2 == 0 ? d->reorder_within_sentences(index) : d->select(index);
        tokens = std::get<1>(got.max(-1)).index_select(0, index);
        if (shortlist) tokens = da->output_columns().index_select(0, tokens);  // columns -> tokens
      }
    }
}

// Members whose output layers have columns closed (train --output-columns corpus): the ensemble
// computes the union of their open columns only (the stacked projection's rows of them) and
// translates as over the whole layers, greedy and beam, scores included.
TEST(Ensemble, MembersWithClosedColumnsComputeTheOpenOnesAsTheWholeLayers) {
  test::TempDir dir;
  torch::manual_seed(5);
  const int64_t vocab = test::sample_tokenizer().vocab_size();
  std::vector<std::string> paths;
  for (const auto& [from, keep] : {std::make_pair(tiny_checkpoint(), 0.5), std::make_pair(other_checkpoint(), 0.6)}) {
    auto loaded = load_checkpoint(from, torch::kCPU);
    at::Tensor open = torch::rand({vocab}) < keep;  // [V] bool
    for (int64_t id : {loaded.meta.model.pad_id, loaded.meta.model.bos_id, loaded.meta.model.eos_id}) open[id] = true;
    loaded.model->close_output_columns(open);
    paths.push_back(dir.file(std::to_string(paths.size()) + ".pt"));
    save_checkpoint(paths.back(), loaded.model, nullptr, loaded.meta);
  }
  TranslatorConfig config;
  config.device = "cpu";
  config.dtype = "fp32";
  config.models = paths;
  Translator restricted = load_translator(config);
  Translator whole = load_translator(config);
  whole.set_open_output_columns({});
  whole.set_languages(whole.languages());
  ASSERT_TRUE(restricted.restricts_output());
  ASSERT_FALSE(whole.restricts_output());
  test::expect_same_translations(whole, restricted, test::sample_lines(10), 4, 1e-3);
}

TEST(Ensemble, AModelWithItselfTranslatesAsTheModel) {
  Translator single = load_translator(unscreened({tiny_checkpoint()}));
  Translator twice = load_translator(unscreened({tiny_checkpoint(), tiny_checkpoint()}));
  test::expect_same_translations(single, twice, test::sample_lines(10), 4, 1e-4);
}

// An ensemble knows both directions only where every member does (serve's reverse pair and
// --reverse-weight trust it).
TEST(Ensemble, BothDirectionsOnlyWhenEveryMemberHasThem) {
  ModelLanguages both;
  both.source = "de";
  both.target = "en";
  both.both_directions = true;
  ModelLanguages one = both;
  one.both_directions = false;
  for (bool second_both : {false, true}) {
    std::vector<Translator> members{test::random_translator(), test::random_translator()};
    members[0].set_languages(both);
    members[1].set_languages(second_both ? both : one);
    const Translator ensemble = make_ensemble_translator(std::move(members), {1.0, 1.0}, {"a.pt", "b.pt"});
    EXPECT_EQ(ensemble.languages().both_directions, second_both);
    EXPECT_EQ(ensemble.languages().source, "de");
  }
}

// Prefixes, constraints and n-best over an ensemble of two different models, and a hypothesis
// scores (forced decoding) as the search scored it.
TEST(Ensemble, SearchFeaturesAndScoresOverTwoModels) {
  TranslatorConfig config;
  config.models = {tiny_checkpoint(), other_checkpoint()};
  config.ensemble_weights = "0.6,0.4";
  config.device = "cpu";
  config.dtype = "fp32";
  Translator ensemble = load_translator(config);
  TranslationOptions options;
  options.search.beam_size = 4;
  options.search.nbest = 3;
  options.batch_size = 3;
  const auto lines = test::sample_lines(6);
  std::vector<LineSteering> steering(lines.size());
  steering[1].target_prefix = "A man";
  steering[2].constraints = {"dog"};
  const auto translations = ensemble.translate(lines, options, {}, steering);
  const auto prefix = ensemble.tgt_tokenizer().encode("A man");
  const auto dog = ensemble.tgt_tokenizer().encode("dog");
  std::vector<std::string> sources;
  std::vector<std::vector<int64_t>> targets;
  std::vector<const Hypothesis*> hypotheses;
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_EQ(translations[i].hypotheses.size(), 3u) << "line " << i;
    for (const auto& h : translations[i].hypotheses) {
      if (i == 1) {
        EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), h.tokens.begin())) << "the prefix";
      }
      if (i == 2) {
        EXPECT_NE(std::search(h.tokens.begin(), h.tokens.end(), dog.begin(), dog.end()), h.tokens.end());
      }
      sources.push_back(lines[i]);
      targets.push_back(h.tokens);
      hypotheses.push_back(&h);
    }
  }
  const auto scores = ensemble.score_tokens(sources, targets, options);
  for (size_t i = 0; i < scores.size(); ++i)
    EXPECT_NEAR(scores[i].log_prob, hypotheses[i]->log_prob, 1e-4 * (1 + std::fabs(hypotheses[i]->log_prob)))
        << "hypothesis " << i;
  // The weights matter: the other way round, another distribution.
  config.ensemble_weights = "0.1,0.9";
  const auto reweighted = load_translator(config).score_tokens(sources, targets, options);
  EXPECT_GT(std::fabs(reweighted[0].log_prob - scores[0].log_prob), 1e-3);
}

TEST(Ensemble, RefusesAnotherVocabularyAndWrongWeights) {
  test::TempDir dir;
  VocabTrainingOptions v;
  v.inputs = {test::sample_en()};
  v.model_prefix = dir.file("en");
  v.vocab_size = test::kSampleVocabSize;
  train_bpe_vocab(v);
  const Tokenizer en = Tokenizer::load(v.model_prefix + ".model");
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = en.vocab_size();
  c.max_positions = 64;
  CheckpointMeta meta;
  meta.model = c;
  meta.src_spm_model = meta.tgt_spm_model = en.serialized();
  meta.src_spm_checksum = meta.tgt_spm_checksum = en.checksum();
  save_checkpoint(dir.file("en.pt"), Transformer(c), nullptr, meta);

  TranslatorConfig config = unscreened({tiny_checkpoint(), dir.file("en.pt")});
  const std::string error = test::error_of([&] { load_translator(config); });
  EXPECT_NE(error.find("ensemble: " + dir.file("en.pt") + " has another source vocabulary than " + tiny_checkpoint()),
            std::string::npos)
      << error;
  config.models = {tiny_checkpoint(), other_checkpoint()};
  for (const std::string weights : {"1", "1,2,3", "1,-1", "1,x", "1,0", "1,nan", "1,"}) {
    config.ensemble_weights = weights;
    const std::string e = test::error_of([&] { load_translator(config); });
    EXPECT_EQ(e.rfind("--ensemble-weights", 0), 0u) << weights << ": " << e;
  }
}

TEST(Ensemble, CommandLineTranslateScoreAndEvaluate) {
  test::TempDir dir;
  const auto lines = test::sample_lines(4);
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  test::write_text(dir.file("in.de"), text);
  const std::string tm = test::torchmt_binary(), models = " -m " + tiny_checkpoint() + " -m " + other_checkpoint();
  auto r = test::run_command(tm + " translate" + models + " --dtype fp32 --beam 2 -i " + dir.file("in.de") + " -o " +
                             dir.file("out.en") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string out = test::read_text(dir.file("out.en"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;
  r = test::run_command("(" + tm + " score" + models + " --dtype fp32 --src " + dir.file("in.de") + " --tgt " +
                        dir.file("out.en") + " 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 4) << r.output;
  r = test::run_command(tm + " evaluate" + models + " --dtype fp32 --beam 2 --src " + dir.file("in.de") + " --ref " +
                        dir.file("out.en") + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("BLEU = 100.00"), std::string::npos) << "the same search, the same output: " << r.output;
  r = test::run_command(tm + " translate" + models + " --ensemble-weights 1 -i " + dir.file("in.de") + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("--ensemble-weights gives 1 weights for 2 models"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace torchmt
