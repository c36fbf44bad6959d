#include "util/environment.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include <unistd.h>  // environ

namespace torchmt {

namespace {

constexpr const char* kLibrary = "torchmt";
constexpr const char* kScripts = "tools/*.sh";

}  // namespace

const std::vector<EnvVariable>& environment_table() {
  static const std::vector<EnvVariable> table{
      // torchmt's own switches (comparisons and machine set-up).
      {"TORCHMT_CPU_ISA", EnvKind::kChoice, "portable|avx2|avx512|avx512-vnni|avx512-bf16|avx512-amx", "the best the CPU runs",
       "the instruction set of every CPU kernel (a lower one on a CPU that has the higher)", kLibrary},
      {"TORCHMT_PACKED_GEMM", EnvKind::kChoice, "aten|mkl|onednn", "by the rule table in src/kernels/packed_linear.cpp",
       "the float GEMM of packed CPU linear layers, forced (aten: nothing packed)", kLibrary},
      {"TORCHMT_SCREENED_ARGMAX", EnvKind::kFlag, "0|1", "1",
       "0: greedy search without scores computes the whole output projection (same tokens)", kLibrary},
      {"TORCHMT_SCREENED_BEAM", EnvKind::kFlag, "0|1", "1",
       "0: fp32 beam search on the CPU computes the whole output projection (without it: int8 logits in the normaliser's tail, ~2e-4)",
       kLibrary},
      {"TORCHMT_SPARSE_INPUT", EnvKind::kFlag, "0|1", "1",
       "0: a ReLU feed-forward layer's second Linear skips no zero inputs (CPU: 1-8 rows, any number from "
       "AVX2 up; A/B)",
       kLibrary},
      {"TORCHMT_NO_TENSOR_POOL", EnvKind::kFlag, "0|1", "0",
       "1: LibTorch's CPU allocator even where torchmt's tensor pool is asked for (train, distill, translate "
       "--tensor-pool)",
       kLibrary},
      {"TORCHMT_CUDNN_SDPA", EnvKind::kFlag, "0|1", "0",
       "1: keeps SDPA's cuDNN attention backend on a GPU (per-shape plans: slow for decoding)", kLibrary},
      {"TORCHMT_DIST_BACKEND", EnvKind::kChoice, "gloo|nccl", "NCCL + Gloo on GPUs when built with NCCL, else Gloo",
       "the collective backend of data-parallel training", kLibrary},
      {"TORCHMT_CACHE_DIR", EnvKind::kText, "a directory", "$XDG_CACHE_HOME/torchmt, else ~/.cache/torchmt",
       "where the --dtype auto speed probe keeps what it measured", kLibrary},
      // Data-parallel training, as torchrun sets them.
      {"WORLD_SIZE", EnvKind::kInteger, "1 or more", "unset: one process", "processes in the job", kLibrary},
      {"RANK", EnvKind::kInteger, "0 .. WORLD_SIZE-1", "required with WORLD_SIZE", "this process's rank", kLibrary},
      {"LOCAL_WORLD_SIZE", EnvKind::kInteger, "1 .. WORLD_SIZE", "WORLD_SIZE", "processes on this machine", kLibrary},
      {"LOCAL_RANK", EnvKind::kInteger, "0 .. LOCAL_WORLD_SIZE-1", "RANK mod LOCAL_WORLD_SIZE",
       "this process's rank on its machine (its GPU)", kLibrary},
      {"MASTER_ADDR", EnvKind::kText, "a host name or address", "127.0.0.1", "rank 0's address", kLibrary},
      {"MASTER_PORT", EnvKind::kInteger, "1 .. 65535", "a free port (one machine)", "rank 0's port", kLibrary},
      {"NNODES", EnvKind::kInteger, "1 or more", "1", "machines in a `train --nproc-per-node` job", kLibrary},
      {"NODE_RANK", EnvKind::kInteger, "0 .. NNODES-1", "0", "this machine's place in such a job", kLibrary},
      {"GLOO_SOCKET_IFNAME", EnvKind::kText, "a network interface", "loopback or the host name's address",
       "the interface Gloo binds across machines", kLibrary},
      // The scripts under tools/.
      {"TORCHMT_BUILD_DIR", EnvKind::kText, "a directory", "build", "where the scripts build", kScripts},
      {"TORCHMT_CMAKE_ARGS", EnvKind::kText, "CMake arguments", "none", "extra arguments for a new build directory",
       kScripts},
      {"TORCHMT_TARGETS", EnvKind::kText, "CMake targets", "all", "build only these targets", kScripts},
      {"TORCHMT_SKIP_INSTALL", EnvKind::kFlag, "0|1", "0", "1: only configure and build (no apt-get or pip)",
       kScripts},
      {"TORCHMT_SETUP", EnvKind::kChoice, "full|cli", "full",
       "cli: set-up installs and configures only what the CLI needs (the quickstart's)", kScripts},
      {"TORCHMT_JOBS", EnvKind::kInteger, "1 or more", "the number of cores", "parallel compile jobs", kScripts},
      {"TORCHMT_TEST_JOBS", EnvKind::kInteger, "1 or more", "2", "parallel test processes (ctest -j)", kScripts},
  };
  return table;
}

namespace {

const EnvVariable* find_variable(const std::string& name) {
  for (const auto& v : environment_table())
    if (name == v.name) return &v;
  return nullptr;
}

}  // namespace

const EnvVariable& environment_variable(const char* name) {
  if (const EnvVariable* v = find_variable(name)) return *v;
  throw std::logic_error(std::string("environment variable ") + name + " is not in torchmt's environment table");
}

namespace {

std::optional<std::string> raw(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

[[noreturn]] void bad_value(const EnvVariable& v, const std::string& value, const std::string& expected) {
  throw std::invalid_argument(std::string("environment variable ") + v.name + "=" + value + ": expected " + expected);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool parse_flag(const EnvVariable& v, const std::string& value) {
  const std::string s = lower(value);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  bad_value(v, value, "1 or 0 (true/false, yes/no, on/off)");
}

// The whole text as a decimal integer, if it is one.
std::optional<long> whole_number(const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || errno != 0) return std::nullopt;
  return n;
}

long parse_integer(const EnvVariable& v, const std::string& value, long min, long max) {
  const auto n = whole_number(value);
  if (!n || *n < min || *n > max)
    bad_value(v, value, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return *n;
}

// The rule alone: its numbers ("1 or more", "1 .. 65535") bound the value; ranges that depend on
// other variables ("0 .. WORLD_SIZE-1") are checked where they are read.
void check_integer(const EnvVariable& v, const std::string& value) {
  const std::string rule = v.values;
  const auto min = whole_number(rule.substr(0, rule.find(' ')));
  const size_t dots = rule.find(".. ");
  const auto max = dots == std::string::npos ? std::nullopt : whole_number(rule.substr(dots + 3));
  const auto n = whole_number(value);
  if (!n || *n < min.value_or(0) || (max && *n > *max)) bad_value(v, value, std::string("an integer, ") + v.values);
}

void check_choice(const EnvVariable& v, const std::string& value) {
  const std::string choices = v.values;
  size_t start = 0;
  while (start <= choices.size()) {
    const size_t bar = std::min(choices.find('|', start), choices.size());
    if (choices.compare(start, bar - start, value) == 0 && value.size() == bar - start) return;
    start = bar + 1;
  }
  bad_value(v, value, "one of " + choices);
}

void check(const EnvVariable& v, const std::string& value) {
  switch (v.kind) {
    case EnvKind::kFlag: parse_flag(v, value); break;
    case EnvKind::kChoice: check_choice(v, value); break;
    case EnvKind::kInteger: check_integer(v, value); break;
    case EnvKind::kText: break;
  }
}

}  // namespace

std::optional<std::string> env_value(const char* name) {
  const EnvVariable& v = environment_variable(name);
  auto value = raw(name);
  if (value) check(v, *value);
  return value;
}

bool env_flag(const char* name, bool fallback) {
  const EnvVariable& v = environment_variable(name);
  if (v.kind != EnvKind::kFlag) throw std::logic_error(std::string(name) + " is not a boolean variable");
  auto value = raw(name);
  return value ? parse_flag(v, *value) : fallback;
}

int env_int(const char* name, int fallback, int min, int max) {
  const EnvVariable& v = environment_variable(name);
  if (v.kind != EnvKind::kInteger) throw std::logic_error(std::string(name) + " is not an integer variable");
  auto value = raw(name);
  return value ? static_cast<int>(parse_integer(v, *value, min, max)) : fallback;
}

std::vector<std::string> check_environment() {
  for (const auto& v : environment_table()) env_value(v.name);
  std::vector<std::string> unknown;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("TORCHMT_", 0) != 0) continue;
    const std::string name = entry.substr(0, entry.find('='));
    if (!find_variable(name)) unknown.push_back(name);
  }
  return unknown;
}

std::vector<std::string> environment_in_effect() {
  std::vector<std::string> set;
  for (const auto& v : environment_table())
    if (auto value = raw(v.name)) set.push_back(std::string(v.name) + "=" + *value);
  return set;
}

}  // namespace torchmt
