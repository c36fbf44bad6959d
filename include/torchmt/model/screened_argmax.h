#pragma once
// Greedy decoding's next token from an output projection, without reading all of it in fp32.
//
// Why: a greedy step of one sentence reads every decoder weight, and it reads them from memory
// (more than this project's CPUs keep in cache between steps: tools/bench/README.md's working-set
// figures); the 8,000-word projection is 8 of the `modern-small` model's 18.4 MB of fp32 weights.
// The next token is the argmax of the logits and needs no log-softmax when no score is asked for.
// So the projection is screened with an int8 copy of its weight (a quarter of the bytes): each
// approximate logit comes with a bound on its distance from the fp32 logit (from the rounding of
// the weight row and of the input row, and fp32 summation), every row the bound cannot rule out
// is computed in fp32 by the same kernel as the full projection (small_batch_dot_fp32), and the
// largest of those is the token the full fp32 projection's top-1 gives. Where another candidate
// comes within a small margin of the best (ties, and values the log-softmax's rounding could
// tie), or the screen leaves too many candidates, the row is left to the caller's full
// projection, so the answer is always the full computation's. TORCHMT_SCREENED_ARGMAX=0 turns
// the screen off (A/B measurements).
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torchmt {

struct ScreenedProjection;

// What the screens of this process did (every thread): rows screened, rows left to the full
// projection, and logits computed in fp32 (the screened rows' candidates).
struct ScreenStats {
  int64_t rows = 0, open_rows = 0, fp32_logits = 0;
};

class ScreenedArgmaxCache {
 public:
  // x [N, K] and weight [V, K] fp32 on the CPU (bias [V] or undefined), in inference (grad mode
  // off, no autocast) with N <= kSmallBatchLinearMaxRows: for each row, the index of its largest
  // x W^T + b as try_small_batch_linear_cpu computes them, or -1 where the full row must decide.
  // Empty when the call does not apply (nothing computed). The int8 copy is made on first use
  // and again when the weight changes (its data pointer or version). Safe from several threads.
  std::vector<int64_t> try_argmax(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
  // Totals since the process started (tests, benchmarks).
  static ScreenStats stats();

 private:
  std::shared_ptr<const ScreenedProjection> screen_;  // read and replaced atomically
};

}  // namespace torchmt
