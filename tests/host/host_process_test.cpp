// torchmt as a library inside another program: the program's own thread count, environment,
// CPU allocator and signal handlers are what it set, before and after torchmt translates (from
// 4 threads at once, through Translator and TranslationService) and trains. Its own executable,
// without the test suite's process set-up (tests/process_setup.cpp): a fresh process as an
// embedding program has it.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "../data_test_support.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/serving/translation_service.h"
#include "torchmt/training/trainer.h"
#include "torchmt/util/device.h"

extern char** environ;

#define TORCHMT_HOST_HAS_CUDNN_SDPA (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace torchmt {
namespace {

std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    env[entry.substr(0, eq)] = eq == std::string::npos ? "" : entry.substr(eq + 1);
  }
  return env;
}

// The host's allocator: LibTorch's default, counting what goes through it.
class HostAllocator final : public c10::Allocator {
 public:
  explicit HostAllocator(c10::Allocator* inner) : inner_(inner) {}
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {  // const before LibTorch 2.3
#endif
    ++allocations;
    return inner_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return inner_->raw_deleter(); }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif
  mutable std::atomic<int64_t> allocations{0};

 private:
  c10::Allocator* inner_;
};

extern "C" void host_handler(int) {}

struct HostSettings {
  int threads;
  int new_thread_threads;  // what a thread started now gets: ATen's process-wide count
  std::map<std::string, std::string> env;
  c10::Allocator* allocator;
  void (*sigint)(int);
  bool cudnn_attention = false;  // LibTorch's global choice of SDPA backends (2.4+)
  static HostSettings now() {
    HostSettings s;
    s.threads = at::get_num_threads();
    std::thread([&] { s.new_thread_threads = at::get_num_threads(); }).join();
    s.env = environment();
    s.allocator = c10::GetCPUAllocator();
    struct sigaction sa {};
    sigaction(SIGINT, nullptr, &sa);
    s.sigint = sa.sa_handler;
#if TORCHMT_HOST_HAS_CUDNN_SDPA
    s.cudnn_attention = at::globalContext().userEnabledCuDNNSDP();
#endif
    return s;
  }
};

void expect_same(const HostSettings& before, const HostSettings& after) {
  EXPECT_EQ(after.threads, before.threads) << "the host thread's count changed";
  EXPECT_EQ(after.new_thread_threads, before.new_thread_threads) << "ATen's process-wide count changed";
  EXPECT_EQ(after.env, before.env) << "the environment changed";
  EXPECT_EQ(after.allocator, before.allocator) << "the CPU allocator changed";
  EXPECT_EQ(after.sigint, before.sigint) << "the SIGINT handler changed";
  EXPECT_EQ(after.cudnn_attention, before.cudnn_attention) << "LibTorch's attention backends changed";
}

// The environment the process started with (the kernel's copy, which setenv does not touch).
std::map<std::string, std::string> initial_environment() {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  std::map<std::string, std::string> env;
  for (std::string entry; std::getline(in, entry, '\0');) {
    const auto eq = entry.find('=');
    env[entry.substr(0, eq)] = eq == std::string::npos ? "" : entry.substr(eq + 1);
  }
  return env;
}

// Nothing linked in changed the environment before main (static initializers).
TEST(HostProcessStart, TheEnvironmentIsTheOneTheProgramStartedWith) {
  ASSERT_TRUE(std::ifstream("/proc/self/environ").good()) << "no /proc";
  EXPECT_EQ(environment(), initial_environment());
}

// The CLI turns cuDNN's attention off for its process (util/device.h); the library, resolving a
// GPU for a translator or a training run, leaves the program's choice alone.
TEST(HostProcessStart, ResolvingAGpuLeavesLibTorchsAttentionBackends) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const HostSettings before = HostSettings::now();
  EXPECT_TRUE(resolve_device("cuda").is_cuda());
  EXPECT_TRUE(resolve_device("auto").is_cuda());
  expect_same(before, HostSettings::now());
}

class HostProcess : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(3);
    ::setenv("HOST_PROGRAM_SETTING", "kept", 1);
    static HostAllocator allocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&allocator, /*priority=*/2);
    host_allocator = &allocator;
    struct sigaction sa {};
    sa.sa_handler = host_handler;
    sigaction(SIGINT, &sa, nullptr);
  }
  static HostAllocator* host_allocator;
};
HostAllocator* HostProcess::host_allocator = nullptr;

std::vector<std::string> lines() { return test::sample_lines(24); }

// Each of 4 threads translates every line on its own, several times: the outputs equal one
// sequential translation.
void translate_from_four_threads(const std::function<std::vector<std::string>(const std::vector<std::string>&)>& call,
                                 const std::vector<std::string>& expected) {
  std::vector<std::vector<std::string>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) got[t] = call(lines());
    });
  for (auto& thread : threads) thread.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

TEST_F(HostProcess, TranslatorFromFourThreadsLeavesTheHostAlone) {
  const HostSettings before = HostSettings::now();
  Translator translator = load_translator(test::tiny_checkpoint(), torch::kCPU, torch::kFloat);
  TranslationOptions options;
  options.batch_size = 5;  // several batches per call
  const auto expected = translator.translate_text(lines(), options);
  // The caller's thread, a team of 2 inside: as the CLI runs a lone worker.
  TranslationOptions lone = options;
  lone.workers = 1;
  lone.threads_per_worker = 2;
  translate_from_four_threads([&](const auto& l) { return translator.translate_text(l, lone); }, expected);
  // A shared translator's own threads: 2 workers x 1 thread for every caller.
  Runtime plan;
  plan.inter_threads = 2;
  plan.intra_threads = 1;
  translator.set_runtime(plan);
  translate_from_four_threads([&](const auto& l) { return translator.translate_text(l, options); }, expected);
  expect_same(before, HostSettings::now());
  EXPECT_GT(host_allocator->allocations.load(), 0) << "tensors were not allocated through the host's allocator";
}

TEST_F(HostProcess, TranslationServiceFromFourThreadsLeavesTheHostAlone) {
  const HostSettings before = HostSettings::now();
  Translator translator = load_translator(test::tiny_checkpoint(), torch::kCPU, torch::kFloat);
  const auto expected = translator.translate_text(lines(), TranslationOptions{});
  {
    ServiceOptions service_options;
    service_options.workers = 2;
    service_options.threads_per_worker = 2;
    TranslationService service(translator, service_options);
    // One sentence per request: the service batches them as it likes; a tiny fp32 model's
    // outputs do not depend on the batch.
    translate_from_four_threads(
        [&](const std::vector<std::string>& l) {
          std::vector<std::string> out;
          for (const auto& line : l) {
            ServiceJob job{{line}, TranslationOptions{}};
            out.push_back(service.submit(job).get().translations.at(0).texts.at(0));
          }
          return out;
        },
        expected);
  }
  expect_same(before, HostSettings::now());
}

TEST_F(HostProcess, TrainingLeavesTheHostAlone) {
  const HostSettings before = HostSettings::now();
  test::TempDir dir;
  TrainOptions o = test::tiny_run(dir.file("run"));
  o.max_steps = 3;
  o.threads = 2;
  std::vector<std::string> seen;
  TrainHooks hooks;
  hooks.on_progress = [&](int64_t, const std::string& line) { seen.push_back(line); };
  EXPECT_EQ(Trainer(o).run(hooks).steps, 3);
  EXPECT_FALSE(seen.empty()) << "no progress lines reached the hook";
  expect_same(before, HostSettings::now());
}

}  // namespace
}  // namespace torchmt
