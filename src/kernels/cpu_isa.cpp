#include "cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <stdexcept>

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "util/environment.h"

namespace torchmt::kernels {
namespace {

constexpr CpuIsa kLevels[] = {CpuIsa::kPortable,    CpuIsa::kAvx2,       CpuIsa::kAvx512,
                              CpuIsa::kAvx512Vnni, CpuIsa::kAvx512Bf16, CpuIsa::kAvx512Amx};

#if TORCHMT_X86
// Linux hands a process AMX's 8 KB of tile state only once it asks (arch_prctl), and refuses
// where the kernel or a sandbox does not support it: then the tiles are not used.
bool tile_data_permitted() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

CpuIsa detect() {
#if TORCHMT_X86
  // libgcc's checks include the OS's support (XCR0) for the AVX and AVX-512 register state.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni");
  const bool bf16 = vnni && __builtin_cpu_supports("avx512bf16");
  // libgcc's AMX checks include the OS's support for the tile state (XCR0).
  if (bf16 && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8") &&
      __builtin_cpu_supports("amx-bf16") && tile_data_permitted())
    return CpuIsa::kAvx512Amx;
  if (bf16) return CpuIsa::kAvx512Bf16;
  if (vnni) return CpuIsa::kAvx512Vnni;
  if (avx512) return CpuIsa::kAvx512;
  if (avx2) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kPortable;
}

std::string level_list(CpuIsa highest) {
  std::string list;
  for (CpuIsa isa : kLevels)
    if (isa <= highest) list += std::string(list.empty() ? "" : "|") + cpu_isa_name(isa);
  return list;
}

// Under TORCHMT_CPU_ISA, oneDNN's JIT and MKL follow that level (unless their own variables are
// set); without it they keep their own choice (AMX included). ATen's own kernels stay at avx2
// wherever AVX2 runs: its AVX-512 copies round differently, and int8 quantizes what they return
// (int8 greedy test_2016 differed on 1 line of 1,000 between ATen's avx2 and avx512 copies, Zen 4),
// so one level keeps `--dtype int8` output the same on every level.
void limit_libraries(CpuIsa isa, bool chosen) {
  static constexpr const char* kOnednn[] = {"SSE41",           "AVX2",           "AVX512_CORE",
                                            "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_AMX"};
  // nullptr: MKL's own choice (the top level limits nothing).
  static constexpr const char* kMkl[] = {"SSE4_2", "AVX2", "AVX512", "AVX512", "AVX512", nullptr};
  static constexpr const char* kAten[] = {"default", "avx2", "avx2", "avx2", "avx2", "avx2"};
  const auto i = static_cast<size_t>(isa);
  if (chosen) {
    setenv("ONEDNN_MAX_CPU_ISA", kOnednn[i], /*overwrite=*/0);
    if (kMkl[i] != nullptr) setenv("MKL_ENABLE_INSTRUCTIONS", kMkl[i], /*overwrite=*/0);
  }
  setenv("ATEN_CPU_CAPABILITY", kAten[i], /*overwrite=*/0);
}

CpuIsa from_environment() {
  const auto value = env_value("TORCHMT_CPU_ISA");  // one of the table's choices, or unset
  return value ? cpu_isa_by_name(*value, "TORCHMT_CPU_ISA") : detected_cpu_isa();
}

thread_local const KernelSettings* thread_settings = nullptr;  // a RuntimeScope's

constexpr int kUnread = -1;
std::atomic<int> configured{kUnread};  // TORCHMT_CPU_ISA or the detected level, once read
std::atomic<int> overridden{kUnread};  // CpuIsaOverride's level while one is alive

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Vnni: return "avx512-vnni";
    case CpuIsa::kAvx512Bf16: return "avx512-bf16";
    case CpuIsa::kAvx512Amx: return "avx512-amx";
    default: return "portable";
  }
}

CpuIsa detected_cpu_isa() {
  static const CpuIsa detected = detect();
  return detected;
}

const std::vector<CpuIsa>& all_cpu_isas() {
  static const std::vector<CpuIsa> all(std::begin(kLevels), std::end(kLevels));
  return all;
}

std::string cpu_isa_names(CpuIsa highest) { return level_list(highest); }

CpuIsa cpu_isa_by_name(const std::string& name, const std::string& what) {
  const CpuIsa detected = detected_cpu_isa();
  for (CpuIsa isa : kLevels)
    if (name == cpu_isa_name(isa)) {
      if (isa > detected)
        throw std::invalid_argument(what + "=" + name + ": this CPU runs at most " + cpu_isa_name(detected) + " (" +
                                    level_list(detected) + ")");
      return isa;
    }
  throw std::invalid_argument(what + "=" + name + ": expected " + level_list(CpuIsa::kAvx512Amx));
}

std::vector<CpuIsa> available_cpu_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : kLevels)
    if (isa <= detected_cpu_isa()) out.push_back(isa);
  return out;
}

const KernelSettings* thread_kernel_settings() { return thread_settings; }
void set_thread_kernel_settings(const KernelSettings* settings) { thread_settings = settings; }

CpuIsa cpu_isa() {
  if (const KernelSettings* s = thread_settings) return s->isa;
  if (const int o = overridden.load(std::memory_order_relaxed); o != kUnread) return static_cast<CpuIsa>(o);
  int level = configured.load(std::memory_order_relaxed);
  if (level == kUnread) {
    level = static_cast<int>(from_environment());  // throws on a bad value, every time it is asked
    configured.store(level, std::memory_order_relaxed);
  }
  return static_cast<CpuIsa>(level);
}

std::string cpu_isa_summary() {
  const CpuIsa active = cpu_isa();
  std::string s = cpu_isa_name(active);
  if (active != detected_cpu_isa() || env_value("TORCHMT_CPU_ISA"))
    s += std::string(" (detected: ") + cpu_isa_name(detected_cpu_isa()) +
         (env_value("TORCHMT_CPU_ISA") ? ", TORCHMT_CPU_ISA=" + *env_value("TORCHMT_CPU_ISA") : std::string()) + ")";
  return s;
}

void limit_library_isas() {
  try {
    limit_libraries(from_environment(), env_value("TORCHMT_CPU_ISA").has_value());
  } catch (const std::exception&) {
  }
}

void size_onednn_primitive_cache(int capacity) {
  if (capacity > 0) setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", std::to_string(capacity).c_str(), /*overwrite=*/0);
}

CpuIsaOverride::CpuIsaOverride(CpuIsa isa) : previous_(overridden.load()) {
  if (isa > detected_cpu_isa())
    throw std::invalid_argument(std::string("instruction set ") + cpu_isa_name(isa) + " is above this CPU's " +
                                cpu_isa_name(detected_cpu_isa()));
  overridden.store(static_cast<int>(isa));
}

CpuIsaOverride::~CpuIsaOverride() { overridden.store(previous_); }

}  // namespace torchmt::kernels
