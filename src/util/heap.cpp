#include "util/heap.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include "util/environment.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace torchmt {
namespace {

constexpr size_t kPoolMinBytes = size_t{64} << 10;  // smaller buffers: LibTorch's allocator
constexpr size_t kPageBytes = size_t{4} << 10;
// A request takes the smallest cached block up to kPoolFit times its size; at most the cache
// limit (heap.h) waits for reuse, the rest is unmapped at once. Exact size classes kept a peak
// per class, or with a small cache lost time unmapping; a fit of 2x kept more memory than 4x
// (the variants: tools/bench/DECISIONS.md).
constexpr size_t kPoolFit = 4;

// The size class of n bytes: n rounded up to 2^p * (1 + i/8), at least a page multiple, so a
// block is at most 12.5% larger than asked and a class holds the buffers of nearby shapes.
size_t size_class(size_t n) {
  size_t top = size_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(n)));
  const size_t step = std::max(top / 8, kPageBytes);
  return (n + step - 1) / step * step;
}

class CpuTensorPool final : public c10::Allocator {
 public:
  explicit CpuTensorPool(c10::Allocator* fallback) : fallback_(fallback) {}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return allocate_impl(n); }
  // Pure virtual since LibTorch 2.3.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }
#else
  // LibTorch before 2.3 declares allocate() const.
  c10::DataPtr allocate(size_t n) const override { return const_cast<CpuTensorPool*>(this)->allocate_impl(n); }
#endif

  // LibTorch's raw_allocate / raw_deallocate (oneDNN's scratch buffers among others) free a
  // buffer through this: pooled blocks return to the pool, the others to the fallback's deleter.
  c10::DeleterFnPtr raw_deleter() const override { return &CpuTensorPool::raw_delete; }

  void release_cached() {
    std::vector<std::pair<void*, size_t>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [bytes, free] : free_) {
        for (void* p : free) {
          blocks.emplace_back(p, bytes);
          sizes_.erase(p);
        }
        stats_.cached_bytes -= bytes * free.size();
        stats_.mapped_bytes -= bytes * free.size();
        free.clear();
      }
    }
    for (const auto& [p, bytes] : blocks) munmap(p, bytes);
  }

  CpuTensorPoolStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void raise_cache_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    cache_limit_ = std::max(cache_limit_, bytes);
    stats_.cache_limit_bytes = cache_limit_;
  }

 private:
  c10::DataPtr allocate_impl(size_t n) {
    if (n < kPoolMinBytes) return fallback_->allocate(n);
    const size_t bytes = size_class(n);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.lower_bound(bytes); it != free_.end() && it->first <= bytes * kPoolFit; ++it) {
        if (it->second.empty()) continue;
        p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= it->first;
        ++stats_.reused;
        break;
      }
    }
    if (p == nullptr) {
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.mapped_bytes += bytes;
      ++stats_.mapped;
      sizes_[p] = bytes;
    }
    return {p, p, &CpuTensorPool::deleter, c10::Device(c10::DeviceType::CPU)};
  }

  static void deleter(void* p);
  static void raw_delete(void* p);

  bool owns(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    return sizes_.count(p) != 0;
  }

  void give_back(void* p) {
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes = sizes_.at(p);
      if (stats_.cached_bytes + bytes <= cache_limit_) {
        free_[bytes].push_back(p);
        stats_.cached_bytes += bytes;
        return;
      }
      sizes_.erase(p);
      stats_.mapped_bytes -= bytes;
    }
    munmap(p, bytes);
  }

  c10::Allocator* fallback_;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::unordered_map<void*, size_t> sizes_;     // every mapped block -> its class
  size_t cache_limit_ = 0;
  CpuTensorPoolStats stats_;
};

// Never destroyed: tensors may outlive static destruction and call the deleter after it.
std::atomic<CpuTensorPool*> pool{nullptr};
std::once_flag pool_once;

void CpuTensorPool::deleter(void* p) { pool.load(std::memory_order_acquire)->give_back(p); }

void CpuTensorPool::raw_delete(void* p) {
  if (p == nullptr) return;
  auto* self = pool.load(std::memory_order_acquire);
  if (!self->owns(p)) {
    self->fallback_->raw_deleter()(p);
    return;
  }
  self->give_back(p);
}

}  // namespace

void use_cpu_tensor_pool(size_t cache_bytes) {
  std::call_once(pool_once, [] {
    if (env_flag("TORCHMT_NO_TENSOR_POOL", false)) return;
    auto* p = new CpuTensorPool(c10::GetCPUAllocator());
    pool.store(p, std::memory_order_release);
    // Priority above the default registration (0), so a later default registration cannot undo it.
    c10::SetCPUAllocator(p, /*priority=*/1);
  });
  if (auto* p = pool.load(std::memory_order_acquire)) p->raise_cache_limit(cache_bytes);
}

void use_one_heap_arena() {
#if defined(__GLIBC__)
  mallopt(M_ARENA_MAX, 1);
#endif
}

void return_free_heap_memory() {
  if (auto* p = pool.load(std::memory_order_acquire)) p->release_cached();
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

CpuTensorPoolStats cpu_tensor_pool_stats() {
  auto* p = pool.load(std::memory_order_acquire);
  return p != nullptr ? p->stats() : CpuTensorPoolStats{};
}

}  // namespace torchmt
