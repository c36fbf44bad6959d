#pragma once
// splitmix64: the one small random generator of torchmt's shuffles and seeds. Header-only, so
// tools without the library (generate_corpus) use the same one. Its stream is the same on every
// platform and standard library, which std::shuffle and std:: distributions do not promise.
#include <cstdint>

namespace torchmt {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// A well-mixed 64-bit function of x (one splitmix64 step from state x).
inline uint64_t mix64(uint64_t x) { return SplitMix64{x}.next(); }

}  // namespace torchmt
