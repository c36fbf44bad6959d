#include "torchmt/util/heap.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace torchmt {

void return_free_heap_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace torchmt
