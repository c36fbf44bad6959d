#pragma once
// The process's CPU memory between batches: large tensor buffers are kept in a pool while a
// batch of work runs and handed back to the operating system, with the C heap's free pages,
// when it ends.
#include <cstddef>

namespace torchmt {

// Makes LibTorch allocate CPU tensor buffers of 64 KiB and more from a pool of mapped blocks
// (sizes rounded up to an eighth of a power of two): a freed block waits, up to cache_bytes of
// them, for the next tensor of at least a quarter of its size, so the big buffers never land
// between the C heap's small objects. Why: glibc serves them from its arenas (its mmap threshold
// rises to 32 MB once a mapped block is freed), and there tensors of every size left holes that
// later ones could not use; a long `translate` run's peak resident memory crept above a
// one-window run's even with malloc_trim after every window (tools/bench/DECISIONS.md). Smaller
// buffers and everything else still come from LibTorch's own allocator. Idempotent; a later call
// with a larger cache_bytes raises the limit; tensors allocated before keep their own deleter.
// TORCHMT_NO_TENSOR_POOL=1 leaves LibTorch's allocator in place (for A/B runs).
constexpr size_t kTensorPoolCacheBytes = size_t{128} << 20;
// Training's limit: every update frees and asks again for buffers of the same sizes (logits,
// activations, their gradients), more than 128 MB of them; glibc mapped, faulted in and unmapped
// them every update (modern-small, bf16: 1.17x the target tokens/s and a fifth lower peak with
// the pool at this limit; tools/bench/DECISIONS.md).
constexpr size_t kTrainingTensorPoolCacheBytes = size_t{2} << 30;
void use_cpu_tensor_pool(size_t cache_bytes = kTensorPoolCacheBytes);

// Puts the C heap in one arena (glibc's M_ARENA_MAX = 1) instead of one per thread that met
// contention: a translate run's worker and OpenMP threads each kept their own arena's free pages
// and holes (modern-small, 1,000 lines, 2 workers, batch 64: int8 greedy 228 vs 271 MiB peak,
// beam 5 261 vs 355 MiB, at about the same speed), but threads that allocate at a high rate
// then wait on its lock (batch 1: 1.27x the time): the CLI does it for large batches only
// (cli/cli_options.h, tools/bench/DECISIONS.md). Process policy: for a program that owns its
// process, never called by the library. Call it before threads start. No effect outside glibc.
void use_one_heap_arena();

// Returns the pool's cached blocks (not those in use) and the free pages inside the C heap to
// the operating system: glibc's malloc_trim(0), which releases free pages in every arena, not
// only the top of the heap. Call it when a unit of work (a window of lines) is done.
void return_free_heap_memory();

struct CpuTensorPoolStats {
  size_t mapped_bytes = 0;  // blocks mapped now, in use or cached
  size_t cached_bytes = 0;  // of those, waiting for reuse
  size_t reused = 0;        // allocations served from the cache since the pool was installed
  size_t mapped = 0;        // allocations that mapped a new block
  size_t cache_limit_bytes = 0;  // the largest cache_bytes asked for
};
CpuTensorPoolStats cpu_tensor_pool_stats();

}  // namespace torchmt
