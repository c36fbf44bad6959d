// What a time budget buys: the budget schedules and their planner, the weight average, the
// named recipes, the measured `--dtype auto`, and metrics.csv across its two layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <ATen/Context.h>
#include <torch/torch.h>

#include "data_test_support.h"
#include "data/token_batcher.h"
#include "io/checkpoint.h"
#include "training/budget_schedule.h"
#include "training/checkpoint_manager.h"
#include "training/dtype_probe.h"
#include "training/exponential_moving_average.h"
#include "training/metrics_log.h"
#include "torchmt/training/train_options.h"
#include "torchmt/training/train_recipes.h"
#include "torchmt/training/trainer.h"
#include "torchmt/util/device.h"
#include "util/probe_cache.h"

namespace torchmt {
namespace {

BudgetSchedule schedule(BudgetShape shape) {
  BudgetScheduleOptions o;
  o.shape = shape;
  o.peak_lr = 1e-3;
  o.warmup_fraction = 0.1;
  o.min_lr_ratio = 0.01;
  o.cooldown_fraction = 0.2;
  return BudgetSchedule(o);
}

TEST(BudgetSchedule, WarmsUpToThePeakAndEndsAtTheFloorWhenThePlanEnds) {
  for (auto shape : {BudgetShape::kCosine, BudgetShape::kRsqrt}) {
    const auto s = schedule(shape);
    const int64_t total = 1000;
    EXPECT_EQ(s.warmup_steps(total), 100);
    EXPECT_DOUBLE_EQ(s.lr(1, total), 1e-5);    // 1/100 of the peak
    EXPECT_DOUBLE_EQ(s.lr(50, total), 5e-4);
    EXPECT_DOUBLE_EQ(s.lr(100, total), 1e-3);  // the peak at the end of the warm-up
    EXPECT_DOUBLE_EQ(s.lr(total, total), 1e-5);   // the floor exactly at the last planned update
    EXPECT_DOUBLE_EQ(s.lr(total + 7, total), 1e-5);
    double previous = s.lr(100, total);
    for (int64_t step = 101; step <= total; ++step) {  // never rises after the warm-up
      const double lr = s.lr(step, total);
      EXPECT_LE(lr, previous + 1e-15) << step;
      EXPECT_GE(lr, 1e-5 - 1e-15) << step;
      previous = lr;
    }
  }
  // Cosine: half-way through the decay, half-way between peak and floor.
  EXPECT_NEAR(schedule(BudgetShape::kCosine).lr(550, 1000), 1e-5 + 0.5 * (1e-3 - 1e-5), 1e-12);
  // rsqrt: the paper's shape until the cool-down (the last 20%), then a straight line to the floor.
  const auto r = schedule(BudgetShape::kRsqrt);
  EXPECT_NEAR(r.lr(400, 1000), 1e-3 * std::sqrt(100.0 / 400.0), 1e-12);
  const double at_cool = 1e-3 * std::sqrt(100.0 / 800.0);
  EXPECT_NEAR(r.lr(800, 1000), at_cool, 1e-12);
  EXPECT_NEAR(r.lr(900, 1000), 1e-5 + (at_cool - 1e-5) * 0.5, 1e-12);
}

TEST(BudgetSchedule, RefusesNonsense) {
  BudgetScheduleOptions o;
  o.peak_lr = 0;
  EXPECT_THROW(BudgetSchedule{o}, std::invalid_argument);
  EXPECT_THROW(parse_budget_shape("linear"), std::invalid_argument);
}

TrainingPosition at(int64_t step, double seconds) {
  TrainingPosition p;
  p.step = step;
  p.train_seconds = seconds;
  return p;
}

TEST(BudgetPlanner, StepAndEpochBudgetsAreExactAndATimeBudgetIsEstimatedFromMeasuredUpdates) {
  EXPECT_EQ(BudgetPlanner(500, 0, 0, 10).planned_steps(at(0, 0)), 500);
  EXPECT_EQ(BudgetPlanner(0, 3, 0, 115.5).planned_steps(at(0, 0)), 347);  // ceil(3 x 115.5)
  EXPECT_EQ(BudgetPlanner(500, 3, 0, 115.5).planned_steps(at(0, 0)), 347);  // the nearer limit

  BudgetPlanner time(0, 0, 10, 100);  // 600 s
  EXPECT_FALSE(time.measured());
  EXPECT_EQ(time.planned_steps(at(0, 0), 2.0), 300);  // before any measurement: the fallback
  // Two slow first updates (4 s each) are not measured; then 0.5 s per update.
  double seconds = 0;
  for (int64_t step = 1; step <= 12; ++step) {
    seconds += step <= 2 ? 4.0 : 0.5;
    time.record(at(step, seconds), seconds);
  }
  EXPECT_TRUE(time.measured());
  EXPECT_DOUBLE_EQ(time.seconds_per_update(), 0.5);
  // 13 s spent, 587 s left at 0.5 s per update: 12 + 1174.
  EXPECT_EQ(time.planned_steps(at(12, seconds)), 1186);
}

TEST(ExponentialMovingAverage, FollowsMariansDecayAndSwapsTheWeightsInAndBack) {
  torch::NoGradGuard no_grad;
  auto w = torch::tensor({1.0f, 2.0f});
  std::vector<at::Tensor> shadow;
  ExponentialMovingAverage ema({w}, shadow, 0.9);
  ASSERT_EQ(shadow.size(), 1u);
  EXPECT_TRUE(torch::equal(shadow[0], w));  // starts at the weights
  EXPECT_DOUBLE_EQ(ema.decay_at(1), 2.0 / 11.0);  // (1 + n) / (10 + n) early on
  EXPECT_DOUBLE_EQ(ema.decay_at(1000), 0.9);
  w.copy_(torch::tensor({3.0f, 4.0f}));
  ema.update(1);
  const double d = 2.0 / 11.0;
  EXPECT_NEAR(shadow[0][0].item<double>(), d * 1 + (1 - d) * 3, 1e-6);
  EXPECT_NEAR(shadow[0][1].item<double>(), d * 2 + (1 - d) * 4, 1e-6);
  const auto average = shadow[0].clone();
  {
    ScopedWeights swap(ema.params(), ema.average());
    EXPECT_TRUE(torch::equal(w, average));
  }
  EXPECT_TRUE(torch::equal(w, torch::tensor({3.0f, 4.0f})));
  EXPECT_THROW(ExponentialMovingAverage({w}, shadow, 1.0), std::invalid_argument);
}

TEST(TrainRecipes, SetDefaultsThatFlagsAndFilesOverride) {
  FlatConfig config;
  config.set("recipe", "multi30k-15min");
  config.set("dropout", "0.3");
  config.set("train_src", "a");
  config.set("train_tgt", "b");
  const TrainOptions o = TrainOptions::from_config(config);
  EXPECT_EQ(o.recipe, "multi30k-15min");
  EXPECT_DOUBLE_EQ(o.dropout, 0.3);                 // given: kept
  EXPECT_EQ(o.lr_schedule, "cosine");               // the recipe's
  EXPECT_DOUBLE_EQ(o.max_minutes, 15);
  EXPECT_EQ(o.to_config().get("recipe"), "multi30k-15min");  // config.yaml records it and the values
  config.set("recipe", "multi30k-2min");
  try {
    TrainOptions::from_config(config);
    FAIL() << "an unknown recipe was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("multi30k-15min"), std::string::npos) << e.what();
  }
  const FlatConfig longer = recipe_config("multi30k-60min");  // the 15-minute recipe, longer, more dropout
  EXPECT_EQ(longer.get("max_minutes"), "60");
  EXPECT_EQ(longer.get("dropout"), "0.2");
  EXPECT_EQ(longer.get("preset"), recipe_config("multi30k-15min").get("preset"));
  // Each budget's own warm-up (chosen apart: tools/recipes/README.md, point AQ).
  EXPECT_EQ(recipe_config("multi30k-15min").get("warmup_fraction"), "0.15");
  EXPECT_EQ(longer.get("warmup_fraction"), "0.1");
  for (const std::string name : {"multi30k-15min", "multi30k-60min"}) {
    FlatConfig c = recipe_config(name);
    c.set("train_src", "a");
    c.set("train_tgt", "b");
    EXPECT_NO_THROW(TrainOptions::from_config(c)) << name;  // every recipe is a valid configuration
  }
}

TEST(TrainOptions, ABudgetScheduleNeedsABudget) {
  TrainOptions o = test::tiny_run("x");
  o.lr_schedule = "cosine";
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.max_minutes = 1;
  EXPECT_NO_THROW(o.validate());
  o.lr_schedule = "step";
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(MetricsLog, ReadsRowsWrittenBeforeTheLearningRateAndAverageColumns) {
  test::TempDir dir;
  test::write_text(dir.file("metrics.csv"),
                   "step,epoch,train_loss,valid_loss,valid_ppl,valid_bleu,tokens_per_sec,wall_seconds\n"
                   "100,1,5.0,4.0,54.6,10.50,3000,60.0\n"
                   "200,1,4.0,3.0,20.1,20.25,3100,120.0,1.000e-03,21.00\n"
                   "300,2,garbage\n");
  MetricsLog log(dir.path().string(), 1000);
  ASSERT_EQ(log.records().size(), 2u);
  EXPECT_DOUBLE_EQ(log.records()[0].valid_bleu, 10.5);
  EXPECT_TRUE(std::isnan(log.records()[0].ema_bleu));
  EXPECT_DOUBLE_EQ(log.records()[1].lr, 1e-3);
  EXPECT_DOUBLE_EQ(log.records()[1].ema_bleu, 21.0);
  ValidationRecord r;
  r.step = 400;
  r.lr = 5e-4;
  log.add(r);  // no average: an empty field
  MetricsLog again(dir.path().string(), 1000);
  ASSERT_EQ(again.records().size(), 3u);
  EXPECT_DOUBLE_EQ(again.records()[2].lr, 5e-4);
  EXPECT_TRUE(std::isnan(again.records()[2].ema_bleu));
}

// Points the probe cache at a directory of the test's own for its lifetime.
class CacheDir {
 public:
  CacheDir() {
    const char* old = std::getenv("TORCHMT_CACHE_DIR");
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    setenv("TORCHMT_CACHE_DIR", dir_.path().c_str(), 1);
  }
  ~CacheDir() {
    if (had_)
      setenv("TORCHMT_CACHE_DIR", old_.c_str(), 1);
    else
      unsetenv("TORCHMT_CACHE_DIR");
  }
  std::string file(const std::string& name) { return dir_.file(name); }

 private:
  test::TempDir dir_;
  std::string old_;
  bool had_ = false;
};

TEST(ProbeCache, KeepsOneRecordPerKeyAcrossInstances) {
  CacheDir dir;
  ProbeCache cache("probe.tsv");
  EXPECT_FALSE(cache.get("k").has_value());
  EXPECT_TRUE(cache.put("k", {"fp32", "fp32 10 vs bf16 5"}));
  EXPECT_TRUE(cache.put("other\tkey", {"bf16", "x"}));  // tabs cannot break the file
  EXPECT_TRUE(cache.put("k", {"bf16", "fp32 5 vs bf16 10"}));
  ProbeCache again("probe.tsv");
  ASSERT_TRUE(again.get("k").has_value());
  EXPECT_EQ(again.get("k")->value, "bf16");
  EXPECT_EQ(again.get("k")->note, "fp32 5 vs bf16 10");
  EXPECT_EQ(again.get("other key")->value, "bf16");
  EXPECT_NE(ProbeCache::machine_key(2), ProbeCache::machine_key(1));
}

TEST(DtypeProbe, MeasuresOnceCachesAndLeavesTheRandomStateAlone) {
  CacheDir dir;
  torch::set_num_threads(1);
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = test::sample_tokenizer().vocab_size();
  CorpusOptions corpus_options;
  auto corpus = load_parallel_corpus(test::sample_de(), test::sample_en(), test::sample_tokenizer(),
                                     test::sample_tokenizer(), corpus_options);
  BatcherOptions b;
  b.batch_tokens = 400;
  TokenBatcher batcher(corpus, b);
  std::vector<Batch> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(batcher.next(torch::kCPU));

  torch::manual_seed(7);
  const auto expected = torch::rand({4});
  torch::manual_seed(7);
  const DtypeChoice first = choose_training_dtype(c, batches, torch::kCPU);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected)) << "the probe moved the random state";
  if (!cpu_has_native_bf16()) {
    EXPECT_EQ(first.dtype, c10::ScalarType::Float);
    EXPECT_NE(first.reason.find("no native bf16"), std::string::npos) << first.reason;
    return;
  }
  EXPECT_NE(first.reason.find("measured now"), std::string::npos) << first.reason;
  EXPECT_NE(first.reason.find("target tokens/s"), std::string::npos) << first.reason;
  const DtypeChoice second = choose_training_dtype(c, batches, torch::kCPU);
  EXPECT_EQ(second.dtype, first.dtype);
  EXPECT_NE(second.reason.find("measured earlier"), std::string::npos) << second.reason;
  // A damaged value in the cache (a line cut short) is measured again, not read as fp32.
  std::string text = test::read_text(dir.file("dtype-probe.tsv"));
  const size_t value = text.find('\t') + 1;
  text.replace(value, 4, text.compare(value, 4, "bf16") == 0 ? "bf1 " : "fp3 ");
  test::write_text(dir.file("dtype-probe.tsv"), text);
  const DtypeChoice third = choose_training_dtype(c, batches, torch::kCPU);
  EXPECT_NE(third.reason.find("measured now"), std::string::npos) << third.reason;
}

// A run with the weight average: checkpoint_last.pt carries it, --resume continues it exactly,
// and validation reports it beside the weights.
TEST(Trainer, WeightAverageResumesExactlyAndIsValidated) {
  test::TempDir dir;
  TrainOptions straight = test::tiny_run(dir.file("straight"));
  straight.dropout = 0.1;
  straight.max_steps = 10;
  straight.ema_decay = 0.9;
  straight.average_best = 2;
  straight.valid_src = test::sample_de();
  straight.valid_tgt = test::sample_en();
  straight.validate_every = 5;
  Trainer(straight).run();

  TrainOptions first = straight;
  first.out = dir.file("resumed");
  first.max_steps = 5;
  Trainer(first).run();
  TrainOptions second = first;
  second.max_steps = 10;
  second.resume = true;
  Trainer(second).run();

  auto restore = [](const std::string& path) {
    auto loaded = load_checkpoint(path, torch::kCPU);
    OptimizerState state;
    for (const auto& p : unique_parameters(*loaded.model)) {
      state.exp_avg.push_back(torch::zeros_like(p));
      state.exp_avg_sq.push_back(torch::zeros_like(p));
      state.steps.push_back(torch::zeros({}));
      state.ema.push_back(torch::zeros_like(p));
    }
    restore_training_state(path, loaded.model, state);
    return state.ema;
  };
  const auto a = restore(dir.file("straight/checkpoint_last.pt"));
  const auto b = restore(dir.file("resumed/checkpoint_last.pt"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
  // The average is not the weights themselves.
  auto weights = unique_parameters(*load_checkpoint(dir.file("straight/checkpoint_last.pt"), torch::kCPU).model);
  EXPECT_FALSE(torch::equal(weights[0], a[0]));

  MetricsLog metrics(dir.file("straight"), 1000);
  ASSERT_EQ(metrics.records().size(), 2u);  // steps 5 and 10
  for (const auto& r : metrics.records()) {
    EXPECT_TRUE(std::isfinite(r.ema_bleu)) << r.step;
    EXPECT_GT(r.lr, 0) << r.step;
  }
  // --average-best 2: one kept validation has nothing to average; two do.
  EXPECT_TRUE(std::isnan(metrics.records()[0].avg_bleu));
  EXPECT_TRUE(std::isfinite(metrics.records()[1].avg_bleu));
  EXPECT_TRUE(std::filesystem::exists(dir.file("straight/top_5.pt")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("straight/top_10.pt")));
  // The resumed run found its step-5 weights again and averaged them at step 10 too.
  MetricsLog resumed(dir.file("resumed"), 1000);
  ASSERT_EQ(resumed.records().size(), 2u);
  EXPECT_DOUBLE_EQ(resumed.records()[1].avg_bleu, metrics.records()[1].avg_bleu);
}

TEST(CheckpointManager, KeepsTheWeightsOfTheBestValidationsForAveraging) {
  test::TempDir dir;
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 32;
  Transformer model(c);
  CheckpointMeta meta;
  meta.model = c;
  CheckpointManager manager(dir.path().string(), 0);
  auto offer = [&](int64_t step, double bleu) {
    meta.position.step = step;
    return manager.offer_top(model, meta, bleu, 2);
  };
  EXPECT_TRUE(offer(1, 10));
  EXPECT_TRUE(offer(2, 12));
  EXPECT_FALSE(offer(3, 9));   // below both kept
  EXPECT_TRUE(offer(4, 11));   // pushes out step 1
  EXPECT_EQ(manager.top_paths(), (std::vector<std::string>{dir.file("top_2.pt"), dir.file("top_4.pt")}));
  EXPECT_FALSE(std::filesystem::exists(dir.file("top_1.pt")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("top_3.pt")));
  // A resumed run that went back to step 3: step 4's file is from its future.
  CheckpointManager again(dir.path().string(), 0);
  again.recall_top({{1, 10}, {2, 12}, {3, 9}});
  EXPECT_EQ(again.top_paths(), (std::vector<std::string>{dir.file("top_2.pt")}));
  EXPECT_FALSE(std::filesystem::exists(dir.file("top_4.pt")));
}

// A step budget with the cosine schedule: the learning rate of the last update is the floor.
TEST(Trainer, CosineScheduleReachesItsFloorAtTheLastStep) {
  test::TempDir dir;
  TrainOptions o = test::tiny_run(dir.file("run"));
  o.lr_schedule = "cosine";
  o.lr = 2e-3;
  o.min_lr_ratio = 0.05;
  o.max_steps = 8;
  o.valid_src = test::sample_de();
  o.valid_tgt = test::sample_en();
  Trainer(o).run();
  MetricsLog metrics(dir.file("run"), 1000);
  ASSERT_EQ(metrics.records().size(), 1u);
  EXPECT_EQ(metrics.records()[0].step, 8);
  EXPECT_NEAR(metrics.records()[0].lr, 1e-4, 1e-12);
}

TEST(TrainCommand, RecipeAndScheduleErrorsAreOneLine) {
  test::TempDir dir;
  const std::string data = " --train-src " + test::sample_de() + " --train-tgt " + test::sample_en() + " --spm " +
                           test::sample_spm_path() + " --out " + dir.file("run");
  auto r = test::run_command(test::torchmt_binary() + " train --recipe nope" + data);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown recipe 'nope' (expected multi30k-15min"), std::string::npos) << r.output;
  r = test::run_command(test::torchmt_binary() + " train --lr-schedule cosine" + data);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("plans for a budget"), std::string::npos) << r.output;
  r = test::run_command(test::torchmt_binary() + " train --recipe multi30k-15min --dump-config" + data);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("lr_schedule: cosine"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
}

}  // namespace
}  // namespace torchmt
