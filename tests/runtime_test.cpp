// kernels/runtime.h: the kernels' settings as an object a translator carries, instead of
// process policy: each translator's batches run under its own, on whichever thread, and nothing
// of it leaks to the caller's thread or to other translators.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "data_test_support.h"
#include "kernels/cpu_isa.h"
#include "kernels/parallel.h"
#include "kernels/primitives.h"
#include "test_support.h"
#include "torchmt/kernels/runtime.h"
#include "torchmt/loading/model_loader.h"
#include "util/thread_team.h"

namespace torchmt {
namespace {

using kernels::CpuIsa;
using test::error_of;

TEST(Runtime, ValuesItCannotRunAreOneLineErrorsNamingTheFieldOrVariable) {
  Runtime r;
  EXPECT_NO_THROW(r.validate());
  r.cpu_isa = "avx9";
  EXPECT_NE(error_of([&] { r.validate(); }).find("cpu_isa=avx9: expected portable|avx2"), std::string::npos);
  r = Runtime{};
  r.packed_gemm = "blas";
  EXPECT_NE(error_of([&] { r.validate(); }).find("packed_gemm=blas"), std::string::npos);
  EXPECT_NE(error_of([&] { RuntimeScope scope(r); }).find("packed_gemm=blas"), std::string::npos);
  if (kernels::detected_cpu_isa() < CpuIsa::kAvx512Bf16) {
    r = Runtime{};
    r.cpu_isa = "avx512-bf16";
    EXPECT_NE(error_of([&] { r.validate(); }).find("this CPU runs at most"), std::string::npos);
  }
  {
    test::ScopedEnv bad("TORCHMT_CPU_ISA", "avx9");
    EXPECT_NE(error_of([] { Runtime::from_environment(); }).find("TORCHMT_CPU_ISA"), std::string::npos);
  }
  r = Runtime{};
  r.intra_threads = 2;  // threads inside workers, but no workers of its own
  EXPECT_NE(error_of([&] { r.validate(); }).find("intra_threads=2 needs inter_threads >= 1"), std::string::npos);
  r.inter_threads = -1;
  EXPECT_NE(error_of([&] { r.validate(); }).find("cannot be negative"), std::string::npos);
  test::ScopedEnv off("TORCHMT_SCREENED_ARGMAX", "0");
  test::ScopedEnv gemm("TORCHMT_PACKED_GEMM", "aten");
  const Runtime env = Runtime::from_environment();
  EXPECT_FALSE(env.screened_argmax);
  EXPECT_TRUE(env.screened_beam);
  EXPECT_EQ(env.packed_gemm, "aten");
  EXPECT_EQ(env.cpu_isa, std::getenv("TORCHMT_CPU_ISA") ? std::getenv("TORCHMT_CPU_ISA") : "");
}

TEST(Runtime, AScopeHoldsOnItsThreadAndInItsParallelLoopsOnly) {
  const CpuIsa outside = kernels::cpu_isa();
  Runtime portable;
  portable.cpu_isa = "portable";
  {
    RuntimeScope scope(portable);
    EXPECT_EQ(kernels::cpu_isa(), CpuIsa::kPortable);
    std::vector<int> seen(64, -1);
    {
      ScopedThreadTeam team(2);  // helper threads of OpenMP's, which have no scope of their own
      kernels::parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)] = static_cast<int>(kernels::cpu_isa());
      });
    }
    for (int level : seen) EXPECT_EQ(level, static_cast<int>(CpuIsa::kPortable));
    CpuIsa other = CpuIsa::kPortable;
    std::thread([&] { other = kernels::cpu_isa(); }).join();
    EXPECT_EQ(other, outside) << "another thread of the program";
    {
      Runtime inner;
      RuntimeScope nested(inner);
      EXPECT_EQ(kernels::cpu_isa(), kernels::detected_cpu_isa());
    }
    EXPECT_EQ(kernels::cpu_isa(), CpuIsa::kPortable);
  }
  EXPECT_EQ(kernels::cpu_isa(), outside);
  EXPECT_EQ(kernels::thread_kernel_settings(), nullptr);
}

// Three translators of one model in one process, each with its own runtime: the greedy screen's
// counter shows which ran where (it needs a vector instruction set and screened_argmax), and
// from three threads at once each gives its own sequential lines.
TEST(Runtime, EachTranslatorRunsItsBatchesUnderItsOwnRuntime) {
  if (kernels::detected_cpu_isa() == CpuIsa::kPortable) GTEST_SKIP() << "no vector instruction set: no screen";
  auto make = [](std::optional<Runtime> runtime) {
    TranslatorConfig c;
    c.models = {test::tiny_checkpoint()};
    c.device = "cpu";
    c.dtype = "fp32";
    c.runtime = runtime;
    return load_translator(c);
  };
  Runtime no_screen, portable;
  no_screen.screened_argmax = false;
  portable.cpu_isa = "portable";
  std::vector<Translator> translators{make(std::nullopt), make(no_screen), make(portable)};
  EXPECT_FALSE(translators[0].runtime());
  EXPECT_EQ(translators[1].runtime(), no_screen);
  const auto lines = test::sample_lines(24);
  TranslationOptions options;
  options.batch_size = 6;
  options.workers = 2;  // on the translator's pool threads, which no caller's scope reaches
  options.threads_per_worker = 1;
  options.search.scores = false;
  std::vector<std::vector<std::string>> sequential;
  std::vector<int64_t> screened;
  for (auto& t : translators) {
    const int64_t before = kernels::screen_stats().rows;
    sequential.push_back(t.translate_text(lines, options));
    screened.push_back(kernels::screen_stats().rows - before);
  }
  EXPECT_GT(screened[0], 0) << "the process's runtime screens";
  EXPECT_EQ(screened[1], 0) << "screened_argmax = false";
  EXPECT_EQ(screened[2], 0) << "portable: no screen";
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<std::string>> got(translators.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < translators.size(); ++i)
      threads.emplace_back([&, i] { got[i] = translators[i].translate_text(lines, options); });
    for (auto& th : threads) th.join();
    for (size_t i = 0; i < translators.size(); ++i) EXPECT_EQ(got[i], sequential[i]) << "translator " << i;
  }
  EXPECT_EQ(kernels::thread_kernel_settings(), nullptr) << "nothing left on the caller's thread";
}

// Training's oneDNN cache size is process policy that yields to the user's own variable.
TEST(OnednnPrimitiveCache, SetsTheCapacityWhereUnsetAndKeepsTheUsersValue) {
  const char* name = "ONEDNN_PRIMITIVE_CACHE_CAPACITY";
  const char* was = std::getenv(name);
  const std::string saved = was ? was : "";
  unsetenv(name);
  kernels::size_onednn_primitive_cache(0);  // nothing asked: nothing set
  EXPECT_EQ(std::getenv(name), nullptr);
  kernels::size_onednn_primitive_cache(kernels::kTrainingOnednnPrimitives);
  ASSERT_NE(std::getenv(name), nullptr);
  EXPECT_EQ(std::string(std::getenv(name)), std::to_string(kernels::kTrainingOnednnPrimitives));
  setenv(name, "100", 1);
  kernels::size_onednn_primitive_cache(kernels::kTrainingOnednnPrimitives);
  EXPECT_EQ(std::string(std::getenv(name)), "100");
  if (was) setenv(name, saved.c_str(), 1); else unsetenv(name);
}

}  // namespace
}  // namespace torchmt
