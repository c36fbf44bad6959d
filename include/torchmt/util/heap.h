#pragma once
// Gives the free memory inside the C heap back to the operating system.

namespace torchmt {

// glibc's malloc_trim(0) (a no-op elsewhere): free pages in every arena are returned, not only
// the top of the heap. Decoding allocates tensors of every size, and without it a long
// `translate` run's resident memory crept above a one-window run's (tensors of the sizes seen
// so far left free holes that later, larger ones could not use; test_2016 repeated, int8
// greedy, 2 workers, 15-minute small model, 2-core EPYC): peak RSS 1,000 lines 283 MB;
// 20,000 lines 343-367 MB untrimmed, 283-310 MB trimmed after each window; 100,000 lines 375
// vs 340 MB; the same speed (100,000 lines 66.5 vs 67.6 s) and output.
void return_free_heap_memory();

}  // namespace torchmt
