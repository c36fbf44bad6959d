// The CUDA variants of what the CPU suite checks: the model, a training update under bf16
// autocast, search, the trainer with resume, and the CLI (train on the GPU, translate and
// export there, the exported file on the CPU). Each skips on a machine without CUDA; the
// optimizer's on-device skip of a non-finite update is checked on the CPU as well.
#include <cstdlib>
#include <limits>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "data_test_support.h"
#include "torchmt/loading/model_loader.h"
#include "data/parallel_corpus.h"
#include "data/text_file.h"
#include "data/token_batcher.h"
#include "torchmt/decoding/translator.h"
#include "io/checkpoint.h"
#include "training/adam_optimizer.h"
#include "training/inverse_sqrt_schedule.h"
#include "training/process_group.h"
#include "training/worker_launcher.h"
#include "torchmt/training/trainer.h"
#include "training/training_step.h"
#include "torchmt/util/device.h"

#include <ATen/Context.h>
#include <torch/version.h>

namespace torchmt {
namespace {

const torch::Device kCuda(torch::kCUDA, 0);

ModelConfig cuda_config() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = test::sample_tokenizer().vocab_size();
  c.max_positions = 64;
  return c;
}

class AdamOnDevice : public ::testing::TestWithParam<std::string> {};

// found_inf = 1 leaves parameters, moments and the step count as they were; 0 updates them.
TEST_P(AdamOnDevice, FoundInfSkipsTheUpdateOnTheDevice) {
  if (GetParam() == "cuda") {
    TORCHMT_SKIP_WITHOUT_CUDA();
  }
  const torch::Device device(GetParam());
  auto p = torch::randn({4, 3}, torch::TensorOptions().device(device)).requires_grad_(true);
  p.mutable_grad() = torch::ones_like(p);
  AdamOptimizer adam({p}, AdamOptions{});
  const auto before = p.detach().clone();
  adam.step(1e-2, torch::ones({}, torch::TensorOptions().device(device)));
  EXPECT_TRUE(torch::equal(p.detach(), before));
  EXPECT_EQ(adam.steps()[0].item<double>(), 0.0);
  EXPECT_EQ(adam.exp_avg()[0].abs().sum().item<double>(), 0.0);
  adam.step(1e-2, torch::zeros({}, torch::TensorOptions().device(device)));
  EXPECT_FALSE(torch::equal(p.detach(), before));
  EXPECT_EQ(adam.steps()[0].item<double>(), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Devices, AdamOnDevice, ::testing::Values("cpu", "cuda"));

// SDPA's cuDNN backend plans every new shape (2.1 s for 40 key lengths of one decoding
// step on an H200, 0.001 s without it): choosing a CUDA device turns it off.
// Resolving a GPU leaves LibTorch's attention backends as the program set them (the library
// inside another program); the CLI's process policy turns cuDNN's per-shape plans off.
TEST(Cuda, OnlyTheCommandsPolicyTurnsOffPerShapeAttentionPlans) {
  TORCHMT_SKIP_WITHOUT_CUDA();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (std::getenv("TORCHMT_CUDNN_SDPA") != nullptr) GTEST_SKIP() << "TORCHMT_CUDNN_SDPA is set";
  const bool before = at::globalContext().userEnabledCuDNNSDP();
  at::globalContext().setSDPUseCuDNN(true);
  EXPECT_EQ(resolve_device("cuda"), kCuda);
  EXPECT_TRUE(at::globalContext().userEnabledCuDNNSDP());
  use_shape_free_cuda_attention();
  EXPECT_FALSE(at::globalContext().userEnabledCuDNNSDP());
  at::globalContext().setSDPUseCuDNN(before);
#else
  GTEST_SKIP() << "LibTorch before 2.4 has no cuDNN attention switch";
#endif
}

TEST(Cuda, ForwardMatchesTheCpuModel) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  torch::manual_seed(3);
  Transformer cpu(cuda_config());
  cpu->eval();
  Transformer gpu(cuda_config());
  gpu->eval();
  {
    torch::NoGradGuard no_grad;
    auto from = cpu->named_parameters();
    for (auto& p : gpu->named_parameters()) p.value().copy_(from[p.key()]);
  }
  gpu->to(kCuda);
  auto src = torch::tensor({{5, 6, 7, 8, 3}, {9, 10, 3, 0, 0}}, torch::kLong);
  auto tgt = torch::tensor({{2, 11, 12, 13}, {2, 14, 0, 0}}, torch::kLong);
  torch::NoGradGuard no_grad;
  // Rows of padded target positions are left out: on CUDA the decoder's self-attention applies
  // causality alone (flash attention), which changes only what padded queries see.
  auto real = tgt.ne(0).unsqueeze(-1).expand({-1, -1, cuda_config().tgt_vocab_size});  // [B, T, V]
  auto expected = cpu->forward(src, tgt).masked_select(real);
  auto got = gpu->forward(src.to(kCuda), tgt.to(kCuda)).cpu().masked_select(real);
  EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-4)) << (got - expected).abs().max().item<double>();
}

// A bf16-autocast update keeps fp32 master weights, reports its loss only on wait(), and
// a few updates on one batch bring the loss down.
TEST(Cuda, Bf16UpdatesKeepFp32WeightsAndLearn) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  torch::manual_seed(5);
  Transformer model(cuda_config());
  model->to(kCuda);
  AdamOptimizer adam(unique_parameters(*model), AdamOptions{});
  TrainingStep step(model, adam, LabelSmoothedCrossEntropy(0.1, 0), kCuda, torch::kBFloat16, 1.0);
  CorpusOptions co;
  auto corpus = load_parallel_corpus(test::sample_de(), test::sample_en(), test::sample_tokenizer(),
                                     test::sample_tokenizer(), co);
  TokenBatcher batcher(corpus, {600, 1, false});
  const Batch batch = batcher.next(kCuda);
  ASSERT_TRUE(batch.src.is_cuda());
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    StepResult r = step.run({batch}, 3e-3);
    EXPECT_TRUE(r.pending.defined());  // nothing read back yet
    r.wait();
    ASSERT_TRUE(r.applied) << "step " << i;
    (i == 0 ? first : last) = r.loss / static_cast<double>(r.tokens);
  }
  EXPECT_LT(last, first * 0.8);
  for (const auto& p : model->parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat);
    EXPECT_TRUE(p.is_cuda());
  }
}

// fp16 with dynamic loss scaling: an update whose gradient holds an inf is skipped (weights
// unchanged) and the scale halved; the next clean updates apply, and after growth_interval of
// them the scale doubles; the model learns.
TEST(Cuda, Fp16LossScalingSkipsAnOverflowAndRecovers) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  torch::manual_seed(5);
  Transformer model(cuda_config());
  model->to(kCuda);
  AdamOptimizer adam(unique_parameters(*model), AdamOptions{});
  TrainingStep step(model, adam, LabelSmoothedCrossEntropy(0.1, 0), kCuda, torch::kHalf, 1.0);
  step.set_loss_scaling(1024.0, 3);
  EXPECT_DOUBLE_EQ(step.loss_scale(), 1024.0);
  CorpusOptions co;
  auto corpus = load_parallel_corpus(test::sample_de(), test::sample_en(), test::sample_tokenizer(),
                                     test::sample_tokenizer(), co);
  TokenBatcher batcher(corpus, {600, 1, false});
  const Batch batch = batcher.next(kCuda);
  // The first backward writes an inf into one gradient (an fp16 overflow).
  bool poisoned = false;
  model->fc_out->bias.register_hook([&poisoned](const at::Tensor& g) {
    if (poisoned) return at::Tensor();
    poisoned = true;
    auto bad = g.clone();
    bad.view(-1)[0] = std::numeric_limits<float>::infinity();
    return bad;
  });
  const auto before = model->fc_out->weight.detach().clone();
  StepResult r = step.run({batch}, 3e-3);
  r.wait();
  EXPECT_FALSE(r.applied);
  EXPECT_TRUE(torch::equal(model->fc_out->weight.detach(), before));
  EXPECT_DOUBLE_EQ(step.loss_scale(), 512.0);
  double first = 0, last = 0;
  int applied = 0;
  for (int i = 0; i < 30; ++i) {
    const double scale_before = step.loss_scale();
    StepResult ok = step.run({batch}, 3e-3);
    ok.wait();
    // Growing every 3 clean updates, the scale soon reaches what this batch's fp16 gradients
    // overflow at (seen on an H200: the 8th update, at 2,048): such an update is skipped
    // and the scale halved, as GradScaler does; most updates apply.
    if (i < 3) {
      ASSERT_TRUE(ok.applied) << "step " << i;
    }
    if (ok.applied) {
      (++applied == 1 ? first : last) = ok.loss / static_cast<double>(ok.tokens);
    } else {
      EXPECT_DOUBLE_EQ(step.loss_scale(), scale_before / 2) << "step " << i;
    }
    if (i == 2) {
      EXPECT_DOUBLE_EQ(step.loss_scale(), 1024.0);  // 3 clean updates: doubled
    }
  }
  EXPECT_GE(applied, 20);
  EXPECT_FALSE(torch::equal(model->fc_out->weight.detach(), before));
  EXPECT_LT(last, first * 0.8);
  // The scale is part of the optimizer state: a checkpoint carries it into a resumed run.
  test::TempDir dir;
  CheckpointMeta meta;
  meta.model = cuda_config();
  save_checkpoint(dir.file("fp16.pt"), model, &adam.state(), meta);
  Transformer again(cuda_config());
  again->to(kCuda);
  AdamOptimizer resumed_adam(unique_parameters(*again), AdamOptions{});
  start_loss_scaling(resumed_adam.state(), kCuda);  // as the trainer does before it resumes
  restore_training_state(dir.file("fp16.pt"), again, resumed_adam.state());
  TrainingStep resumed(again, resumed_adam, LabelSmoothedCrossEntropy(0.1, 0), kCuda, torch::kHalf, 1.0);
  EXPECT_DOUBLE_EQ(resumed.loss_scale(), step.loss_scale());
  EXPECT_TRUE(torch::equal(resumed_adam.state().growth_tracker, adam.state().growth_tracker));
}

// On the CPU fp16 training is refused in one line (the CLI: exit 2 before anything is written).
TEST(Fp16, TrainingOnTheCpuIsAClearError) {
  Transformer model(cuda_config());
  AdamOptimizer adam(unique_parameters(*model), AdamOptions{});
  try {
    TrainingStep step(model, adam, LabelSmoothedCrossEntropy(0.1, 0), torch::kCPU, torch::kHalf, 1.0);
    FAIL() << "fp16 on the CPU was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
  }
  test::TempDir dir;
  auto run = test::run_command(test::torchmt_binary() + " train --train-src " + test::sample_de() + " --train-tgt " +
                               test::sample_en() + " --device cpu --dtype fp16 --out " + dir.file("run"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--dtype fp16 trains on CUDA only"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
}

TEST(Cuda, GreedyAndBeamSearchMatchTheCpu) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  torch::manual_seed(9);
  Transformer model(cuda_config());
  Translator cpu(model, test::sample_tokenizer(), test::sample_tokenizer(), torch::kCPU, torch::kFloat);
  const auto lines = test::sample_lines(12);
  TranslationOptions o;
  o.batch_size = 5;
  std::vector<std::vector<std::string>> expected;
  for (int64_t beam : {1, 4}) {
    o.search.beam_size = beam;
    expected.push_back(cpu.translate_text(lines, o));
  }
  model->to(kCuda);
  Translator gpu(model, test::sample_tokenizer(), test::sample_tokenizer(), kCuda, torch::kFloat);
  size_t k = 0;
  for (int64_t beam : {1, 4}) {
    o.search.beam_size = beam;
    EXPECT_EQ(gpu.translate_text(lines, o), expected[k++]) << "beam " << beam;
    o.use_cache = false;  // prefix recomputation decodes the same
    EXPECT_EQ(gpu.translate_text(lines, o), expected[k - 1]) << "beam " << beam << " without cache";
    o.use_cache = true;
  }
  o.search.beam_size = 4;
  Translator gpu_bf16(model, test::sample_tokenizer(), test::sample_tokenizer(), kCuda, torch::kBFloat16);
  EXPECT_EQ(gpu_bf16.translate_text(lines, o).size(), lines.size());
}

TrainOptions cuda_run(const std::string& out) {
  TrainOptions o = test::tiny_run(out);
  o.valid_src = test::sample_de();
  o.valid_tgt = test::sample_en();
  o.dtype = "bf16";
  o.device = "cuda";
  o.threads = 0;
  o.validate_every = 20;
  o.max_steps = 40;
  return o;
}

// Training on the GPU, resumed, and its checkpoint translating on the CPU.
TEST(Cuda, TrainerTrainsResumesAndItsCheckpointTranslatesOnTheCpu) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  test::TempDir dir;
  TrainOptions o = cuda_run(dir.file("run"));
  auto first = Trainer(o).run();
  EXPECT_EQ(first.steps, 40);
  o.resume = true;
  o.max_steps = 60;
  auto second = Trainer(o).run();
  EXPECT_EQ(second.steps, 20);
  EXPECT_TRUE(std::isfinite(second.last_train_loss));
  EXPECT_LT(second.last_train_loss, 12.0);
  auto translator = load_translator(dir.file("run") + "/checkpoint_last.pt", torch::kCPU, torch::kFloat);
  TranslationOptions t;
  EXPECT_EQ(translator.translate_text(test::sample_lines(3), t).size(), 3u);
}

// A data-parallel group of one process on the GPU (what one GPU can check of the NCCL path):
// CUDA tensors are reduced and broadcast by NCCL on the device, CPU tensors by Gloo; a
// 1-worker job through the group trains to the same weights with NCCL as with Gloo alone.
TEST(Cuda, NcclProcessGroupOfOneReducesOnTheDeviceAndTrainsLikeGloo) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  if (!distributed_available()) GTEST_SKIP() << "built without Gloo's headers";
  ASSERT_TRUE(nccl_available()) << "a CUDA build without NCCL (nccl.h not found when it was built)";
  {
    DistributedEnv env;
    env.present = true;
    env.master_port = free_loopback_port();
    ProcessGroup group(env, std::chrono::seconds(60), kCuda);
    EXPECT_EQ(group.backend(), "NCCL + Gloo");
    auto x = torch::arange(10, torch::TensorOptions(kCuda).dtype(torch::kFloat));
    auto expected = x.clone();
    group.all_reduce_sum(x, "test all-reduce");
    EXPECT_TRUE(x.is_cuda());
    EXPECT_TRUE(torch::equal(x.cpu(), expected.cpu()));
    auto b = torch::full({3}, 7.0, torch::TensorOptions(kCuda));
    group.broadcast({b}, 0);
    EXPECT_TRUE(torch::equal(b.cpu(), torch::full({3}, 7.0)));
    std::string bytes = "tokenizer";
    group.broadcast_bytes(bytes, 0);
    EXPECT_EQ(bytes, "tokenizer");
    group.barrier();
    EXPECT_TRUE(group.all_true(true));
    EXPECT_FALSE(group.all_true(false));
  }
  test::TempDir dir;
  std::map<std::string, at::Tensor> weights[2];
  for (int run = 0; run < 2; ++run) {
    ::setenv("WORLD_SIZE", "1", 1);
    ::setenv("RANK", "0", 1);
    ::setenv("MASTER_PORT", std::to_string(free_loopback_port()).c_str(), 1);
    ::setenv("TORCHMT_DIST_BACKEND", run == 0 ? "nccl" : "gloo", 1);
    TrainOptions o = cuda_run(dir.file("run" + std::to_string(run)));
    o.dtype = "fp32";
    o.max_steps = 20;
    o.validate_every = 100;
    auto summary = Trainer(o).run();
    EXPECT_EQ(summary.steps, 20);
    auto model = load_checkpoint(dir.file("run" + std::to_string(run)) + "/checkpoint_last.pt", torch::kCPU).model;
    for (const auto& p : model->named_parameters()) weights[run][p.key()] = p.value().detach().cpu();
  }
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_PORT", "TORCHMT_DIST_BACKEND"}) ::unsetenv(v);
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (const auto& [name, w] : weights[0])
    EXPECT_TRUE(torch::allclose(w, weights[1].at(name), 0, 1e-6)) << name << ": NCCL vs Gloo";
}

// The CLI on the GPU: translate and evaluate with --device cuda, export a GPU-trained
// checkpoint and run the TorchScript file on the CPU and on the GPU.
TEST(Cuda, CliTranslatesEvaluatesAndExports) {
  TORCHMT_SKIP_WITHOUT_CUDA();
  test::TempDir dir;
  TrainOptions o = cuda_run(dir.file("run"));
  o.max_steps = 300;  // enough for non-empty translations to compare
  o.validate_every = 0;
  Trainer(o).run();
  const std::string tm = test::torchmt_binary(), ckpt = dir.file("run") + "/checkpoint_last.pt";
  const std::string head = "head -5 " + test::sample_de();
  // stdout only: stderr carries the timing line
  auto gpu = test::run_command("(" + head + " | " + tm + " translate -m " + ckpt +
                               " --device cuda --dtype fp32 --beam 4 2>/dev/null)");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  auto cpu = test::run_command("(" + head + " | " + tm + " translate -m " + ckpt +
                               " --device cpu --dtype fp32 --beam 4 2>/dev/null)");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_EQ(gpu.output, cpu.output);
  EXPECT_NE(cpu.output.find_first_not_of('\n'), std::string::npos) << "translations are all empty";
  auto eval = test::run_command(tm + " evaluate -m " + ckpt + " --src " + test::sample_de() + " --ref " +
                                test::sample_en() + " --device cuda");
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_NE(eval.output.find("BLEU"), std::string::npos) << eval.output;
  auto exported = test::run_command(tm + " export -m " + ckpt + " -o " + dir.file("model.ts"));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  for (const std::string device : {"cpu", "cuda"}) {
    auto ts = test::run_command("(" + head + " | " + tm + " translate -m " + dir.file("model.ts") + " --device " +
                                device + " --dtype fp32 --beam 4 2>/dev/null)");
    ASSERT_EQ(ts.exit_code, 0) << device << ": " << ts.output;
    EXPECT_EQ(ts.output, cpu.output) << device;
  }
}

}  // namespace
}  // namespace torchmt
