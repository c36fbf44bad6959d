// bench_gemm: the packed fp32 GEMMs of inference (kernels/packed_linear.cpp) side by side, per
// weight shape and row count, on this machine: at::linear (nothing packed), MKL's packed API and
// oneDNN's packed weight, each timed in the same run, and which one the rule table picks at the
// active instruction set. The evidence for the rule table's rows (tools/bench/DECISIONS.md).
// Beside them the int8 kernel (kernels/int8_linear.cpp, the input quantization included) on the
// same shapes, and the multiply-accumulates per second of the fastest fp32 path and of int8. With
// --zeros F the inputs have that share of zeros (a ReLU's output) and the sparse-input kernel
// (kernels/sparse_input_linear.cpp) is timed beside them where it applies (1-8 rows; any number
// from AVX2 up for outputs in blocks of 64).
// With --checkpoint PATH the weights are that model's Linear layers (one row each, named), not
// random ones of --shapes, and a column says which share of each layer's input groups the AVX2
// int8 kernel adds in pairs (Int8LinearWeights::group_order).
//   bench_gemm [--shapes OUTxIN,...] [--checkpoint PATH] [--rows M,...] [--threads N] [--seconds S] [--zeros F]
// Default shapes: the base model's decoder step (512x512, 2048x512, 512x2048, 1024x512) and its
// output projections (32000x512, 58101x512); rows: a greedy batch (64), a beam-5 batch (320) and
// an encoder batch (1280).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "kernels/cpu_isa.h"
#include "kernels/primitives.h"
#include "io/checkpoint.h"
#include "bench_options.h"

namespace {

// Minimum seconds per call over repetitions filling about `budget` seconds (after one warm-up).
template <typename F>
double time_call(F&& f, double budget) {
  f();
  double best = 1e30, spent = 0;
  int calls = 0;
  while (spent < budget || calls < 3) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    spent += s;
    ++calls;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  namespace k = torchmt::kernels;
  cxxopts::Options options("bench_gemm", "fp32 inference GEMMs: at::linear vs MKL's and oneDNN's packed weights");
  options.add_options()("shapes", "weights OUTxIN", cxxopts::value<std::string>()->default_value(
                                                         "512x512,1024x512,2048x512,512x2048,32000x512,58101x512"))(
      "rows", "rows per call", cxxopts::value<std::string>()->default_value("64,320,1280"))(
      "threads", "intra-op threads", cxxopts::value<int>()->default_value("2"))(
      "seconds", "time per measurement", cxxopts::value<double>()->default_value("0.5"))(
      "zeros", "fraction of the inputs that are zeros (a ReLU's output); above 0 the sparse-input kernel is timed too where it applies",
      cxxopts::value<double>()->default_value("0"))(
      "checkpoint", "a torchmt checkpoint: time its Linear weights (each by name) instead of random ones of --shapes",
      cxxopts::value<std::string>()->default_value(""))("h,help", "this help");
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", options.help().c_str());
      return 0;
    }
    const int threads = args["threads"].as<int>();
    const double seconds = args["seconds"].as<double>();
    if (threads < 1) throw std::invalid_argument("--threads: must be at least 1");
    if (!(seconds > 0)) throw std::invalid_argument("--seconds: must be positive");
    const double zeros = args["zeros"].as<double>();
    if (!(zeros >= 0 && zeros < 1)) throw std::invalid_argument("--zeros: must be in [0, 1)");
    std::vector<std::pair<int64_t, int64_t>> shapes;
    {
      std::stringstream in(args["shapes"].as<std::string>());
      std::string item;
      while (std::getline(in, item, ',')) {
        const auto x = item.find('x');
        if (x == std::string::npos) throw std::invalid_argument("--shapes: '" + item + "' is not OUTxIN");
        const auto out = torchmt::bench::parse_ints(item.substr(0, x), "shapes"),
                   in_ = torchmt::bench::parse_ints(item.substr(x + 1), "shapes");
        shapes.emplace_back(out[0], in_[0]);
      }
    }
    const auto rows = torchmt::bench::parse_ints(args["rows"].as<std::string>(), "rows");
    torch::set_num_threads(threads);
    torch::manual_seed(0);
    torch::NoGradGuard no_grad;
    // The weights timed: [out, in] each, named by their shape or by the checkpoint's parameter.
    std::vector<std::pair<std::string, at::Tensor>> weights;
    if (const auto path = args["checkpoint"].as<std::string>(); !path.empty()) {
      const auto loaded = torchmt::load_checkpoint(path, torch::kCPU);
      for (const auto& p : loaded.model->named_parameters())
        if (p.value().dim() == 2 && p.key().find("weight") != std::string::npos &&
            p.key().find("emb") == std::string::npos)
          weights.emplace_back(p.key(), p.value().detach().to(torch::kFloat).contiguous());
      if (weights.empty()) throw std::invalid_argument("--checkpoint: '" + path + "' has no Linear weights");
    } else {
      for (const auto& [out, in] : shapes)
        weights.emplace_back(std::to_string(out) + "x" + std::to_string(in),
                             torch::randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in))));  // [out, in]
    }
    std::size_t name_width = 11;
    for (const auto& [name, w] : weights) name_width = std::max(name_width, name.size());
    std::vector<k::PackedGemm> gemms{k::PackedGemm::kAten};
    for (auto g : k::available_packed_gemms()) gemms.push_back(g);
    std::printf("instruction set %s, %d threads; ms per call (fastest of repeated calls), ratio = aten / path\n",
                k::cpu_isa_name(k::cpu_isa()), threads);
    std::printf("%-*s %6s", static_cast<int>(name_width), "weight", "rows");
    for (auto g : gemms) std::printf(" %9s", k::packed_gemm_name(g));
    for (size_t i = 1; i < gemms.size(); ++i) std::printf(" %7s/x", k::packed_gemm_name(gemms[i]));
    std::printf("  rule    max|diff| %9s %10s %10s %6s", "int8", "fp32 GMAC/s", "int8 GMAC/s", "pairs");
    if (zeros > 0) std::printf(" %9s %8s %9s", "sparse", "best/x", "max|diff|");
    std::printf("\n");
    for (const auto& [name, w] : weights) {
      const int64_t out = w.size(0), in = w.size(1);
      const auto b = torch::randn({out}) * 0.1;
      std::vector<k::PackedWeights> packed;
      for (auto g : gemms) packed.push_back(k::pack_weight(w, g));
      const auto int8_weights = k::quantize_linear_int8(w, b, 0.f, false);
      int64_t paired = 0;  // groups added in pairs on AVX2, of blocks x groups
      for (const int32_t pairs : int8_weights->pair_count) paired += 2 * pairs;
      const double pair_share = static_cast<double>(paired) / static_cast<double>(int8_weights->group_order.size());
      const auto sparse_weights = zeros > 0 ? k::pack_sparse_input_weight(w, b) : nullptr;
      for (int64_t m : rows) {
        auto x = torch::randn({m, in});  // [M, in]
        if (zeros > 0) x = x.abs() * (torch::rand({m, in}) >= zeros);  // a ReLU's output with that share of zeros
        const auto reference = torch::linear(x, w, b);
        std::vector<double> ms;  // NaN where a path does not apply to this shape
        double max_diff = 0;
        for (size_t i = 0; i < gemms.size(); ++i) {
          auto call = [&] {
            return gemms[i] == k::PackedGemm::kAten ? torch::linear(x, w, b) : k::try_packed_linear(packed[i], x, b);
          };
          const auto y = call();
          if (!y.defined()) {
            ms.push_back(std::nan(""));
            continue;
          }
          max_diff = std::max(max_diff, (y - reference).abs().max().item<double>());
          ms.push_back(1e3 * time_call(call, seconds));
        }
        const double int8_ms = 1e3 * time_call([&] { return k::int8_linear(x, *int8_weights); }, seconds);
        const double macs = static_cast<double>(m) * static_cast<double>(out) * static_cast<double>(in);
        double best = ms[0];
        for (double t : ms)
          if (t < best) best = t;  // NaN compares false: skipped
        std::printf("%-*s %6ld", static_cast<int>(name_width), name.c_str(), static_cast<long>(m));
        for (double t : ms) std::isnan(t) ? std::printf(" %9s", "-") : std::printf(" %9.3f", t);
        for (size_t i = 1; i < ms.size(); ++i)
          std::isnan(ms[i]) ? std::printf(" %9s", "-") : std::printf(" %8.2fx", ms[0] / ms[i]);
        std::printf("  %-7s %.1e %9.3f %10.1f %10.1f %5.1f%%", k::packed_gemm_name(k::packed_gemm_for(out, in)), max_diff,
                    int8_ms, macs / best / 1e6, macs / int8_ms / 1e6, 100 * pair_share);
        const auto sparse_y = sparse_weights ? k::try_sparse_input_linear(*sparse_weights, x) : at::Tensor();
        if (sparse_y.defined()) {
          const double sparse_ms = 1e3 * time_call([&] { return k::try_sparse_input_linear(*sparse_weights, x); }, seconds);
          const double diff = (sparse_y - reference).abs().max().item<double>();
          std::printf(" %9.3f %7.2fx %9.1e", sparse_ms, best / sparse_ms, diff);
        }
        std::printf("\n");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 2;
  }
  return 0;
}
