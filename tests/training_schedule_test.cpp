// The trainer's parts: stop criteria, checkpoint rotation, the validation comparison.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"
#include "training/checkpoint_manager.h"
#include "training/stop_criteria.h"
#include "training/validator.h"

namespace torchmt {
namespace {

TrainingPosition at(int64_t step, int64_t epoch, int64_t batch, double seconds) {
  TrainingPosition p;
  p.step = step;
  p.epoch = epoch;
  p.batch_index = batch;
  p.train_seconds = seconds;
  return p;
}

TEST(StopCriteria, EachLimitStopsAndNoLimitNeverDoes) {
  StopCriteria none({}, 10, 1);
  EXPECT_FALSE(none.reached(at(1000000, 500, 0, 1e9)));
  EXPECT_EQ(none.eta_seconds(at(5, 1, 5, 10), 2.0), -1);

  StopCriteria steps({100, 0, 0}, 10, 1);
  EXPECT_FALSE(steps.reached(at(99, 10, 9, 0)));
  EXPECT_TRUE(steps.reached(at(100, 11, 0, 0)));
  EXPECT_DOUBLE_EQ(steps.eta_seconds(at(40, 5, 0, 0), 0.5), 30.0);

  StopCriteria epochs({0, 2, 0}, 10, 2);  // 10 batches per epoch, 2 per update
  EXPECT_FALSE(epochs.reached(at(9, 2, 8, 0)));
  EXPECT_TRUE(epochs.reached(at(10, 3, 0, 0)));
  // At epoch 2 batch 4: 6 batches left = 3 updates.
  EXPECT_DOUBLE_EQ(epochs.eta_seconds(at(7, 2, 4, 0), 1.0), 3.0);

  StopCriteria minutes({0, 0, 1.5}, 10, 1);
  EXPECT_FALSE(minutes.reached(at(1, 1, 1, 89.9)));
  EXPECT_TRUE(minutes.reached(at(1, 1, 1, 90.0)));
  EXPECT_DOUBLE_EQ(minutes.eta_seconds(at(1, 1, 1, 30.0), 100.0), 60.0);

  StopCriteria both({1000, 0, 1.0}, 10, 1);  // the nearest limit gives the ETA
  EXPECT_DOUBLE_EQ(both.eta_seconds(at(0, 1, 0, 0), 1.0), 60.0);
}

TEST(CheckpointManager, KeepsLastBestAndTheNewestNumbered) {
  test::TempDir dir;
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = 32;
  Transformer model(c);
  CheckpointMeta meta;
  meta.model = c;
  CheckpointManager manager(dir.path().string(), 2);
  OptimizerState adam;  // Adam's two moments: twice the weights' bytes
  for (const auto& p : model->parameters()) {
    adam.exp_avg.push_back(torch::zeros_like(p));
    adam.exp_avg_sq.push_back(torch::zeros_like(p));
    adam.steps.push_back(torch::zeros({}));
  }
  for (int64_t step : {10, 20, 30, 40}) {
    meta.position.step = step;
    manager.save(model, &adam, meta, /*best=*/step == 20, /*numbered=*/true);
    // The best checkpoint is for using (translate, export, average): no optimizer state, so a
    // third of the bytes and a fast start.
    if (step == 20) {
      EXPECT_LT(std::filesystem::file_size(manager.best_path()) * 2, std::filesystem::file_size(manager.last_path()));
    }
  }
  meta.position.step = 45;
  manager.save(model, nullptr, meta, false, /*numbered=*/false);  // an interrupt: last only
  const auto numbered = manager.numbered();
  ASSERT_EQ(numbered.size(), 2u);
  EXPECT_EQ(std::filesystem::path(numbered[0]).filename(), "checkpoint_30.pt");
  EXPECT_EQ(std::filesystem::path(numbered[1]).filename(), "checkpoint_40.pt");
  EXPECT_EQ(load_checkpoint(manager.last_path(), torch::kCPU).meta.position.step, 45);
  EXPECT_EQ(load_checkpoint(manager.best_path(), torch::kCPU).meta.position.step, 20);

  CheckpointManager none((dir.path() / "none").string(), 0);
  std::filesystem::create_directories(dir.path() / "none");
  none.save(model, nullptr, meta, false, true);
  EXPECT_TRUE(none.numbered().empty());
  EXPECT_TRUE(std::filesystem::exists(none.last_path()));
  EXPECT_FALSE(std::filesystem::exists(none.best_path()));
}

TEST(Validator, HigherBleuWinsAndEqualBleuFallsBackToLoss) {
  ValidationScores s;
  s.bleu = 20;
  s.loss = 2.0;
  EXPECT_TRUE(Validator::improves(s, -1, std::numeric_limits<double>::infinity()));  // the first validation
  EXPECT_TRUE(Validator::improves(s, 19.9, 1.0));
  EXPECT_FALSE(Validator::improves(s, 20.1, 3.0));
  EXPECT_TRUE(Validator::improves(s, 20, 2.1));
  EXPECT_FALSE(Validator::improves(s, 20, 2.0));
}

}  // namespace
}  // namespace torchmt
