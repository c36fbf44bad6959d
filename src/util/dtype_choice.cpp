#include "util/dtype_choice.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <ATen/Context.h>
#include <torch/torch.h>

#include "torchmt/util/device.h"
#include "util/probe_cache.h"

namespace torchmt {
namespace {

// bf16 must beat fp32 by this much to be chosen: it rounds every matmul's inputs, so a near
// tie goes to the exact one.
constexpr double kBf16Margin = 1.05;

}  // namespace

DtypeChoice choose_dtype_by_measuring(const c10::Device& device, const std::string& key,
                                      const std::function<double(c10::ScalarType)>& throughput,
                                      const std::string& unit) {
  // A GPU computes bf16 natively, but a small model's step there is bound by kernel launches,
  // which autocast's casts add to, so bf16 can lose there too (tools/bench/DECISIONS.md).
  if (device.is_cpu() && !cpu_has_native_bf16())
    return {c10::ScalarType::Float, "fp32: this CPU has no native bf16 (AMX or AVX512-BF16)"};
  const std::string full_key = ProbeCache::machine_key(torch::get_num_threads()) +
                               (device.is_cuda() ? "|" + ProbeCache::gpu_key() + "|" + device.str() : "") + "|" + key;
  const ProbeCache cache("dtype-probe.tsv");
  // A value other than the two it writes (a damaged cache line) is measured again.
  if (auto hit = cache.get(full_key); hit && (hit->value == "bf16" || hit->value == "fp32")) {
    const auto dtype = hit->value == "bf16" ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
    return {dtype, hit->value + ": measured earlier on this machine (" + hit->note + "; " + cache.path() + ")"};
  }
  // The work may draw random numbers (dropout, initial weights): the caller must not see that.
  at::Generator generator = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  const at::Tensor rng_state = generator.get_state();
  std::optional<at::Generator> device_generator;
  at::Tensor device_rng_state;
  if (device.is_cuda()) {
    device_generator = at::globalContext().defaultGenerator(device);
    device_rng_state = device_generator->get_state();
  }
  const double fp32 = throughput(c10::ScalarType::Float);
  const double bf16 = throughput(c10::ScalarType::BFloat16);
  generator.set_state(rng_state);
  if (device_generator) device_generator->set_state(device_rng_state);
  const bool use_bf16 = bf16 > kBf16Margin * fp32;
  char note[200];
  std::snprintf(note, sizeof(note), "fp32 %.0f vs bf16 %.0f %s, %.2fx", fp32, bf16, unit.c_str(),
                bf16 / std::max(fp32, 1e-9));
  const std::string value = use_bf16 ? "bf16" : "fp32";
  // A cache it cannot write (TORCHMT_CACHE_DIR a file, a read-only home) costs a probe every run: said.
  const std::string kept = cache.put(full_key, {value, note})
                               ? std::string()
                               : "; not kept: cannot write " + (cache.path().empty() ? "a cache (no HOME)" : cache.path());
  return {use_bf16 ? c10::ScalarType::BFloat16 : c10::ScalarType::Float,
          value + ": measured now (" + note + kept + ")"};
}

}  // namespace torchmt
