// The CPU tensor pool (util/heap.h): large buffers are reused by size class, small ones are not
// pooled, cached blocks go back to the system when asked, and tensors from it compute as usual.
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "util/heap.h"

namespace torchmt {
namespace {

class CpuTensorPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("TORCHMT_NO_TENSOR_POOL") != nullptr) GTEST_SKIP() << "TORCHMT_NO_TENSOR_POOL is set";
    use_cpu_tensor_pool();
    return_free_heap_memory();
  }
};

TEST_F(CpuTensorPoolTest, AFreedBufferServesTheNextTensorOfItsClassAndIsReleasedWhenAsked) {
  const auto before = cpu_tensor_pool_stats();
  auto a = torch::empty({100000});  // 400,000 bytes: class 425,984 (256 KiB + 5 * 32 KiB)
  void* where = a.data_ptr();
  auto after_first = cpu_tensor_pool_stats();
  EXPECT_EQ(after_first.mapped, before.mapped + 1);
  EXPECT_EQ(after_first.mapped_bytes, before.mapped_bytes + 425984);
  a = torch::Tensor();
  EXPECT_EQ(cpu_tensor_pool_stats().cached_bytes, before.cached_bytes + 425984);

  auto b = torch::empty({99000}, torch::kFloat);  // 396,000 bytes: the same class
  EXPECT_EQ(b.data_ptr(), where);
  EXPECT_EQ(cpu_tensor_pool_stats().reused, before.reused + 1);
  auto c = torch::empty({120000});  // 480,000 bytes: the next class, a block of its own
  EXPECT_NE(c.data_ptr(), where);
  EXPECT_EQ(cpu_tensor_pool_stats().mapped, before.mapped + 2);

  b = torch::Tensor();
  c = torch::Tensor();
  return_free_heap_memory();
  const auto released = cpu_tensor_pool_stats();
  EXPECT_EQ(released.cached_bytes, 0u);
  EXPECT_EQ(released.mapped_bytes, before.mapped_bytes);
}

TEST_F(CpuTensorPoolTest, AFreedBlockServesTensorsDownToAQuarterOfItsSize) {
  auto a = torch::empty({100000});  // class 425,984 bytes
  void* where = a.data_ptr();
  a = torch::Tensor();
  auto quarter_too_small = torch::empty({22500});  // 90,000 bytes: class 90,112, 4x is under 425,984
  EXPECT_NE(quarter_too_small.data_ptr(), where);
  auto half = torch::empty({50000});  // 200,000 bytes: takes the cached block
  EXPECT_EQ(half.data_ptr(), where);
}

TEST_F(CpuTensorPoolTest, AtMost128MBWaitForReuse) {
  const auto before = cpu_tensor_pool_stats();
  if (before.cache_limit_bytes != kTensorPoolCacheBytes) GTEST_SKIP() << "an earlier test raised the limit";
  auto a = torch::empty({20 << 20});  // 80 MiB each: one fits in the cache, two do not
  auto b = torch::empty({20 << 20});
  a = torch::Tensor();
  b = torch::Tensor();
  const auto s = cpu_tensor_pool_stats();
  EXPECT_EQ(s.cached_bytes, before.cached_bytes + (size_t{80} << 20));
  EXPECT_EQ(s.mapped_bytes, before.mapped_bytes + (size_t{80} << 20));
}

TEST_F(CpuTensorPoolTest, SmallTensorsAreNotPooled) {
  const auto before = cpu_tensor_pool_stats();
  auto small = torch::ones({16000});  // 64,000 bytes, under 64 KiB
  EXPECT_EQ(cpu_tensor_pool_stats().mapped, before.mapped);
  EXPECT_EQ(cpu_tensor_pool_stats().reused, before.reused);
  EXPECT_EQ(small.sum().item<float>(), 16000.0f);
}

TEST_F(CpuTensorPoolTest, PooledTensorsComputeLikeOthersAcrossThreads) {
  torch::manual_seed(0);
  const auto x = torch::randn({256, 512});
  const auto w = torch::randn({512, 300});
  const auto expected = torch::mm(x, w);  // [256, 300]
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      int good = 0;
      for (int i = 0; i < 25; ++i) {
        auto y = torch::mm(x, w) + torch::zeros({256, 300});  // pooled buffers, freed and reused
        good += torch::allclose(y, expected, 1e-5, 1e-5) ? 1 : 0;
      }
      ok[t] = good;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 25) << "thread " << t;
  const auto s = cpu_tensor_pool_stats();
  EXPECT_GT(s.reused, 0u);
  EXPECT_LE(s.cached_bytes, s.mapped_bytes);
  return_free_heap_memory();
  EXPECT_EQ(cpu_tensor_pool_stats().cached_bytes, 0u);
}

// Training's limit (kept last: it raises the process's limit for good).
TEST_F(CpuTensorPoolTest, ALargerLimitKeepsMoreBlocksAndASmallerOneDoesNotLowerIt) {
  use_cpu_tensor_pool(size_t{256} << 20);
  use_cpu_tensor_pool();  // the default again: the limit stays
  const auto before = cpu_tensor_pool_stats();
  EXPECT_EQ(before.cache_limit_bytes, size_t{256} << 20);
  auto a = torch::empty({20 << 20});  // 80 MiB each: both fit under 256 MiB
  auto b = torch::empty({20 << 20});
  a = torch::Tensor();
  b = torch::Tensor();
  EXPECT_EQ(cpu_tensor_pool_stats().cached_bytes, before.cached_bytes + (size_t{160} << 20));
  return_free_heap_memory();
  EXPECT_EQ(cpu_tensor_pool_stats().cached_bytes, 0u);
}

}  // namespace
}  // namespace torchmt
