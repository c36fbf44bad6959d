// Checkpoints: round trip, clear errors on corrupt / truncated / foreign files and on a
// model-shape mismatch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_support.h"
#include "training/adam_optimizer.h"
#include "io/checkpoint.h"
#include "model/linear.h"
#include "training/training_step.h"
#include "util/integrity.h"

namespace torchmt {
namespace {

ModelConfig checkpoint_config(int64_t vocab = 50) {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = vocab;
  c.tie_embeddings = true;
  return c;
}

std::string saved_checkpoint(const test::TempDir& dir, const ModelConfig& config) {
  torch::manual_seed(2);
  Transformer model(config);
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  CheckpointMeta meta;
  meta.model = config;
  meta.position.step = 17;
  meta.position.epoch = 3;
  meta.src_spm_model = std::string("\xff\xfenot-utf8-proto", 16);
  const std::string path = dir.file("ck.pt");
  save_checkpoint(path, model, &optimizer.state(), meta);
  return path;
}

TEST(Checkpoint, RoundTripsWeightsAndPosition) {
  test::TempDir dir;
  auto config = checkpoint_config();
  auto path = saved_checkpoint(dir, config);
  torch::manual_seed(2);
  Transformer original(config);
  auto loaded = load_checkpoint(path, torch::kCPU);
  EXPECT_EQ(loaded.meta.position.step, 17);
  EXPECT_EQ(loaded.meta.position.epoch, 3);
  EXPECT_EQ(loaded.meta.src_spm_model, std::string("\xff\xfenot-utf8-proto", 16));
  auto a = original->named_parameters();
  auto b = loaded.model->named_parameters();
  for (const auto& p : a) EXPECT_TRUE(torch::equal(p.value(), b[p.key()])) << p.key();
  // Tied embeddings stay tied after loading.
  EXPECT_TRUE(b["src_embedding.weight"].is_same(b["fc_out.weight"]));
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(Checkpoint, MissingCorruptTruncatedAndForeignFilesAreClearErrors) {
  test::TempDir dir;
  auto path = saved_checkpoint(dir, checkpoint_config());
  auto expect_error = [](const std::string& file, const std::string& fragment) {
    try {
      load_checkpoint(file, torch::kCPU);
      ADD_FAILURE() << "no error for " << file;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  };
  expect_error(dir.file("absent.pt"), "not found");
  test::write_text(dir.file("garbage.pt"), "this is not a checkpoint at all");
  expect_error(dir.file("garbage.pt"), "is not a torchmt checkpoint");
  auto bytes = test::read_text(path);
  test::write_text(dir.file("truncated.pt"), bytes.substr(0, bytes.size() / 2));
  expect_error(dir.file("truncated.pt"), "corrupt");
  // A valid torch.save file that is not ours.
  c10::impl::GenericDict foreign(c10::StringType::get(), c10::AnyType::get());
  foreign.insert("weights", torch::ones({2}));
  auto foreign_bytes = torch::pickle_save(c10::IValue(foreign));
  const std::string foreign_archive(foreign_bytes.begin(), foreign_bytes.end());
  test::write_text(dir.file("foreign.pt"), foreign_archive);
  expect_error(dir.file("foreign.pt"), "carries no checksum");  // unverifiable: never unpickled
  test::write_text(dir.file("foreign.pt"), seal_zip(foreign_archive));
  expect_error(dir.file("foreign.pt"), "not a torchmt checkpoint");
}

// A --both-directions model's columns for each way come back as saved (and reach its languages);
// a mask that is not one of 0/1 bytes for every piece is a clear error naming the file.
TEST(Checkpoint, EachWaysOutputColumnsRoundTripAndCorruptOnesAreClearErrors) {
  test::TempDir dir;
  const ModelConfig config = checkpoint_config();
  torch::manual_seed(2);
  Transformer model(config);
  CheckpointMeta meta;
  meta.model = config;
  meta.both_directions = true;
  meta.target_columns = {0, 1, 2, 3, 7, 49};
  meta.source_columns = {0, 1, 2, 3, 8};
  const std::string path = dir.file("both.pt");
  save_checkpoint(path, model, nullptr, meta);
  const auto loaded = load_checkpoint(path, torch::kCPU).meta;
  EXPECT_EQ(loaded.target_columns, meta.target_columns);
  EXPECT_EQ(loaded.source_columns, meta.source_columns);
  EXPECT_EQ(checkpoint_languages(loaded).target_columns, meta.target_columns);
  EXPECT_EQ(checkpoint_languages(loaded).source_columns, meta.source_columns);
  EXPECT_TRUE(load_checkpoint(saved_checkpoint(dir, config), torch::kCPU).meta.target_columns.empty());

  const auto bytes = test::read_text(path);
  for (const auto& bad : {torch::full({config.tgt_vocab_size}, 2, torch::kUInt8), torch::ones({3}, torch::kUInt8)}) {
    auto dict = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
    dict.insert_or_assign("target_columns", bad);
    const auto archive = torch::pickle_save(c10::IValue(dict));
    const std::string corrupt = dir.file("corrupt.pt");
    test::write_text(corrupt, seal_zip(std::string(archive.begin(), archive.end())));
    try {
      load_checkpoint(corrupt, torch::kCPU);
      ADD_FAILURE() << "no error for a target_columns of " << bad.numel();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("corrupt target_columns"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(corrupt), std::string::npos) << e.what();
    }
  }
}

// fp16's dynamic loss scale is part of the optimizer state: a resumed run goes on with it.
TEST(Checkpoint, TheFp16LossScaleIsSavedAndRestored) {
  test::TempDir dir;
  const auto config = checkpoint_config();
  const std::string plain = saved_checkpoint(dir, config);  // written without fp16
  torch::manual_seed(2);
  Transformer model(config);
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  start_loss_scaling(optimizer.state(), torch::kCPU, 512.0);
  optimizer.state().growth_tracker.fill_(7);
  CheckpointMeta meta;
  meta.model = config;
  const std::string fp16 = dir.file("fp16.pt");
  save_checkpoint(fp16, model, &optimizer.state(), meta);

  auto restore = [&](const std::string& path, bool scaling) {
    Transformer resumed(config);
    AdamOptimizer fresh(unique_parameters(*resumed), AdamOptions{});
    if (scaling) start_loss_scaling(fresh.state(), torch::kCPU);  // as the trainer does before a resume
    restore_training_state(path, resumed, fresh.state());
    return fresh.state();
  };
  const OptimizerState back = restore(fp16, true);
  EXPECT_EQ(back.loss_scale.item<float>(), 512.0f);
  EXPECT_EQ(back.growth_tracker.scalar_type(), torch::kInt);
  EXPECT_EQ(back.growth_tracker.item<int>(), 7);
  // Saved without fp16: the run's fresh scale stays; resumed without fp16: no scale appears.
  EXPECT_EQ(restore(plain, true).loss_scale.item<float>(), 128.0f);
  EXPECT_FALSE(restore(fp16, false).loss_scale.defined());
}

// Another shape is refused naming what differs; dropout and activation checkpointing are how the
// run trains, which a resume may change (less memory after running out of it).
TEST(Checkpoint, ResumingIntoAnotherModelShapeIsRefused) {
  test::TempDir dir;
  auto path = saved_checkpoint(dir, checkpoint_config(50));
  ModelConfig wider = checkpoint_config(60);
  wider.d_ff *= 2;
  Transformer other(wider);
  AdamOptimizer optimizer(unique_parameters(*other), AdamOptions{});
  try {
    restore_training_state(path, other, optimizer.state());
    ADD_FAILURE() << "resumed into another shape";
  } catch (const std::runtime_error& e) {
    const std::string named = "(d_ff " + std::to_string(checkpoint_config().d_ff) + " against " +
                              std::to_string(wider.d_ff) + ", src_vocab_size 50 against 60, tgt_vocab_size 50 against 60)";
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
  ModelConfig trains_otherwise = checkpoint_config(50);
  trains_otherwise.dropout = 0.3;
  trains_otherwise.checkpoint_activations = true;
  Transformer same(trains_otherwise);
  AdamOptimizer same_optimizer(unique_parameters(*same), AdamOptions{});
  EXPECT_NO_THROW(restore_training_state(path, same, same_optimizer.state()));
}

TEST(Checkpoint, PythonTorchLoadReadsItIntoTheReferenceModel) {
  test::TempDir dir;
  auto path = saved_checkpoint(dir, checkpoint_config());
  auto r = test::run_command(test::python() + " " + test::source_dir() + "/tests/reference/parity.py checkpoint " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "torchmt-checkpoint 17 16\n");  // format, step, bytes of the (fake) spm proto
}

TEST(Checkpoint, ModelsForLoadingDrawNoRandomNumbersAndHaveTheSameParameters) {
  for (bool tie : {true, false}) {
    auto config = checkpoint_config();
    config.tie_embeddings = tie;
    Transformer drawn(config);
    torch::manual_seed(5);
    const auto expected = torch::rand({4});
    torch::manual_seed(5);
    Transformer bare(nullptr);
    {
      SkipParameterInit guard;
      EXPECT_TRUE(SkipParameterInit::active());
      bare = Transformer(config);
    }
    EXPECT_FALSE(SkipParameterInit::active());
    EXPECT_TRUE(torch::equal(torch::rand({4}), expected)) << "building the model drew random numbers";
    auto a = drawn->named_parameters();
    auto b = bare->named_parameters();
    ASSERT_EQ(a.keys(), b.keys());
    for (const auto& p : a) EXPECT_EQ(p.value().sizes(), b[p.key()].sizes()) << p.key();
    EXPECT_EQ(unique_parameters(*drawn).size(), unique_parameters(*bare).size());
    EXPECT_EQ(b["src_embedding.weight"].is_same(b["fc_out.weight"]), tie);
  }
}

TEST(Checkpoint, UniqueParametersListTiedTensorsOnce) {
  Transformer tied(checkpoint_config());
  auto config = checkpoint_config();
  config.tie_embeddings = false;
  Transformer untied(config);
  EXPECT_EQ(unique_parameters(*tied).size() + 2, unique_parameters(*untied).size());
}

// A tied weight is one tensor under three names: the file holds it once, from the GPU too (a
// host copy per name wrote it three times).
TEST(Checkpoint, TiedWeightsAreWrittenOnceFromAnyDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  test::TempDir dir;
  torch::manual_seed(2);
  Transformer model(checkpoint_config(4000));
  CheckpointMeta meta;
  meta.model = checkpoint_config(4000);
  save_checkpoint(dir.file("cpu.pt"), model, nullptr, meta);
  model->to(torch::kCUDA);
  save_checkpoint(dir.file("gpu.pt"), model, nullptr, meta);
  const auto size = [&](const std::string& name) { return static_cast<double>(std::filesystem::file_size(dir.file(name))); };
  EXPECT_NEAR(size("gpu.pt"), size("cpu.pt"), 0.01 * size("cpu.pt"));
  auto loaded = load_checkpoint(dir.file("gpu.pt"), torch::kCPU);
  const auto b = loaded.model->named_parameters();
  EXPECT_TRUE(b["src_embedding.weight"].is_same(b["fc_out.weight"]));
}

}  // namespace
}  // namespace torchmt
