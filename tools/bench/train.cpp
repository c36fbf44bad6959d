// bench_train: target tokens/s of a training update, torchmt against the Python reference
// model (tests/reference) on the same batches, the same initial weights and the same
// optimizer/recipe, for each preset and dtype; plus the validation loss after the same
// number of steps (bf16 must stay within 2% of fp32) and the model FLOPs utilisation.
//
//   bench_train [--device cpu|cuda] [--presets small,base] [--dtypes fp32,bf16] [--steps 20]
//               [--base-steps 6] [--peak-tflops X]
//               [--profile DIR]   (a Chrome trace of 3 more updates per run; summarise it with
//                                  tools/bench/profile_summary.py)
//
// MFU = model FLOPs per second / the device's peak. Model FLOPs count the matrix products of
// the padded batch (projections, attention scores and weighted sums, feed-forward, output
// layer), 3x the forward pass for forward + backward, nothing for recomputation. The peak is
// --peak-tflops when given (a datasheet's dense figure), and always also the matrix-product
// ceiling measured here, so MFU is printed against both.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <cxxopts.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include "data/parallel_corpus.h"
#include "data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "io/checkpoint.h"
#include "torchmt/model/multi_head_attention.h"
#include "training/inverse_sqrt_schedule.h"
#include "training/training_step.h"
#include "torchmt/util/device.h"
#include "torchmt/util/flat_config.h"
#include "util/stopwatch.h"
#include "kernels/cpu_isa.h"

using namespace torchmt;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

struct Measured {
  double tokens_per_sec = 0;
  double valid_loss = 0;
  double flops_per_sec = 0;  // model FLOPs (see the file comment)
};

std::vector<Batch> take(TokenBatcher& batcher, int64_t n) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(batcher.next(torch::kCPU));
  return out;
}

// The batches on `device`, copied before any timing (both sides time updates, not copies).
std::vector<Batch> on_device(std::vector<Batch> batches, const c10::Device& device) {
  for (auto& b : batches) {
    b.src = b.src.to(device);
    b.tgt_in = b.tgt_in.to(device);
    b.tgt_out = b.tgt_out.to(device);
  }
  return batches;
}

// GFLOP/s of an [n, k] x [k, n] matmul in `dtype` on `device`: the ceiling a training step's
// matmuls can reach there (2048x512x2048 on CPU, 8192^3 on a GPU).
double matmul_gflops(c10::ScalarType dtype, const c10::Device& device) {
  const int64_t n = device.is_cuda() ? 8192 : 2048, k = device.is_cuda() ? 8192 : 512;
  auto options = torch::TensorOptions().device(device).dtype(dtype);
  auto a = torch::randn({n, k}, options), b = torch::randn({k, n}, options);
  for (int i = 0; i < 3; ++i) torch::mm(a, b);
  const int repeats = device.is_cuda() ? 50 : 20;
  Stopwatch clock(device);
  for (int i = 0; i < repeats; ++i) torch::mm(a, b);
  return 2.0 * static_cast<double>(n * k * n) * repeats / clock.seconds() / 1e9;
}

AttentionKernel kernel_named(const std::string& name) {
  return name == "fused" ? AttentionKernel::kFused : name == "explicit" ? AttentionKernel::kExplicit
                                                                        : AttentionKernel::kAuto;
}

// Forward-pass FLOPs of the matrix products of one padded batch (see the file comment).
double forward_flops(const ModelConfig& c, const Batch& b) {
  const double B = static_cast<double>(b.src.size(0)), S = static_cast<double>(b.src.size(1)),
               T = static_cast<double>(b.tgt_in.size(1)), d = static_cast<double>(c.d_model),
               ff = static_cast<double>(c.d_ff), V = static_cast<double>(c.tgt_vocab_size);
  const double src = B * S, tgt = B * T;
  const double encoder = src * (8 * d * d + 4 * d * ff) + 4 * B * S * S * d;
  const double decoder = tgt * (8 * d * d + 4 * d * d + 4 * d * ff) + src * 4 * d * d + 4 * B * T * T * d +
                         4 * B * T * S * d;
  return static_cast<double>(c.num_encoder_layers) * encoder + static_cast<double>(c.num_decoder_layers) * decoder +
         2 * tgt * d * V;
}

// Runs `batches` through `step` under LibTorch's (Kineto) profiler and writes a Chrome trace.
void profile_updates(TrainingStep& step, const std::vector<Batch>& batches, const c10::Device& device,
                     const std::string& trace_path) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/true);
  std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  if (device.is_cuda()) activities.insert(prof::ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  for (const Batch& b : batches) step.run({b}, 1e-4);
  synchronize(device);
  torch::autograd::profiler::disableProfiler()->save(trace_path);
}

// `open` ([V] bool, or undefined: every column): the output columns trained (train
// --output-columns corpus), the others closed; FLOPs count the open ones.
Measured run_ours(const ModelConfig& config, const std::vector<Batch>& batches, int64_t warmup,
                  const std::vector<Batch>& valid, const c10::Device& device, c10::ScalarType dtype,
                  const std::string& trace_path, const at::Tensor& open = {}) {
  torch::manual_seed(1);
  Transformer model(config);
  model->to(device);
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  InverseSqrtSchedule schedule(1.0, config.d_model, 4000);
  TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(0.1, 0), device, dtype, 1.0);
  ModelConfig counted = config;
  if (open.defined()) {
    model->close_output_columns(open);
    step.set_output_columns(open);
    counted.tgt_vocab_size = open.sum().item<int64_t>();
  }
  int64_t tokens = 0;
  double flops = 0;
  std::optional<Stopwatch> clock;  // started after the warm-up updates; read once at the end
  for (size_t i = 0; i < batches.size(); ++i) {
    if (static_cast<int64_t>(i) == warmup) clock.emplace(device);
    auto r = step.run({batches[i]}, schedule.lr(static_cast<int64_t>(i) + 1));
    r.wait();  // as the trainer does once per update (for its log line and skip count)
    if (static_cast<int64_t>(i) >= warmup) {
      tokens += r.tokens;
      flops += 3 * forward_flops(counted, batches[i]);
    }
  }
  const double seconds = clock ? clock->seconds() : 0.0;
  Measured measured{seconds > 0 ? tokens / seconds : 0.0, evaluate_nll(model, valid, device, dtype),
                    seconds > 0 ? flops / seconds : 0.0};
  if (!trace_path.empty()) {
    const size_t n = std::min<size_t>(3, batches.size());
    profile_updates(step, std::vector<Batch>(batches.end() - static_cast<std::ptrdiff_t>(n), batches.end()), device,
                    trace_path);
  }
  return measured;
}

void save_for_python(const std::string& path, const ModelConfig& config, const std::vector<Batch>& batches,
                     const std::vector<Batch>& valid) {
  torch::manual_seed(1);
  Transformer model(config);  // the same initial weights run_ours starts from
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& p : model->named_parameters()) state.insert(p.key(), p.value().detach().clone());
  dict.insert("state", state);
  dict.insert("config_json", config.to_json());
  auto to_list = [](const std::vector<Batch>& bs, at::Tensor Batch::*field) {
    c10::List<at::Tensor> list;
    for (const auto& b : bs) list.push_back(b.*field);
    return list;
  };
  dict.insert("src", to_list(batches, &Batch::src));
  dict.insert("tgt_in", to_list(batches, &Batch::tgt_in));
  dict.insert("tgt_out", to_list(batches, &Batch::tgt_out));
  dict.insert("valid_src", to_list(valid, &Batch::src));
  dict.insert("valid_tgt_in", to_list(valid, &Batch::tgt_in));
  dict.insert("valid_tgt_out", to_list(valid, &Batch::tgt_out));
  auto bytes = torch::pickle_save(c10::IValue(dict));
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Measured run_python(const std::string& script, const std::string& blob, const std::string& dtype, int64_t warmup,
                    int64_t threads, const c10::Device& device, const std::string& attention) {
  const std::string cmd = "python3 " + script + " " + blob + " --dtype " + dtype + " --warmup " +
                          std::to_string(warmup) + " --threads " + std::to_string(threads) + " --device " +
                          device.str() + " --attention " + attention;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + cmd);
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe)) output += buf;
  if (pclose(pipe) != 0) throw std::runtime_error("Python reference failed: " + output);
  auto json = FlatConfig::parse(output.substr(output.rfind('{')));
  return {json.get_double("tokens_per_sec"), json.get_double("valid_loss")};
}

}  // namespace

int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  torchmt::use_shape_free_cuda_attention();
  torchmt::use_training_process_policy();  // as the train command
  cxxopts::Options options("bench_train", "Training throughput: torchmt vs the Python reference model.");
  options.add_options()("src", "training source", cxxopts::value<std::string>()->default_value("data/multi30k/train.de.gz"))(
      "tgt", "training target", cxxopts::value<std::string>()->default_value("data/multi30k/train.en.gz"))(
      "device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))(
      "presets", "comma-separated presets", cxxopts::value<std::string>()->default_value("small,base"))(
      "dtypes", "comma-separated dtypes", cxxopts::value<std::string>()->default_value("fp32,bf16"))(
      "steps", "timed updates per run (small)", cxxopts::value<int64_t>()->default_value("20"))(
      "base-steps", "timed updates per run for base/big", cxxopts::value<int64_t>()->default_value("6"))(
      "warmup", "untimed updates first", cxxopts::value<int64_t>()->default_value("2"))(
      "batch-tokens", "rows x (source + target) tokens per batch, padding included (the paper's 25,000 source + "
      "25,000 target tokens: 50000)", cxxopts::value<int64_t>()->default_value("4096"))(
      "threads", "CPU threads (0 = all)", cxxopts::value<int64_t>()->default_value("0"))(
      "peak-tflops", "the device's datasheet peak for MFU (0 = only the measured matmul ceiling)",
      cxxopts::value<double>()->default_value("0"))(
      "attention", "our attention kernels to compare: auto, fused, explicit (comma-separated)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "python-attention", "the Python reference's attention: explicit (the documents' code), sdpa "
      "(F.scaled_dot_product_attention) or both", cxxopts::value<std::string>()->default_value("explicit"))(
      "work-dir", "scratch directory", cxxopts::value<std::string>()->default_value("/tmp/torchmt_bench_train"))(
      "output-columns", "also train over only the output columns the corpus's targets hold (train --output-columns "
      "corpus) and print its speed against every column's: all | corpus",
      cxxopts::value<std::string>()->default_value("all"))(
      "profile", "write a Chrome trace of 3 extra updates per run into this directory",
      cxxopts::value<std::string>()->default_value(""))("no-python", "skip the Python reference")("h,help", "help");
  cxxopts::ParseResult r;
  c10::Device device(c10::kCPU);
  std::vector<std::string> attentions, kernels;
  try {
    r = options.parse(argc, argv);
    if (r.count("help")) {
      std::cout << options.help() << "\n";
      return 0;
    }
    device = resolve_device(r["device"].as<std::string>());
    const std::string a = r["python-attention"].as<std::string>();
    if (a != "explicit" && a != "sdpa" && a != "both")
      throw std::invalid_argument("--python-attention: expected explicit, sdpa or both, got '" + a + "'");
    attentions = a == "both" ? std::vector<std::string>{"explicit", "sdpa"} : std::vector<std::string>{a};
    const std::string columns = r["output-columns"].as<std::string>();
    if (columns != "all" && columns != "corpus")
      throw std::invalid_argument("--output-columns: expected all or corpus, got '" + columns + "'");
    for (const auto& k : split(r["attention"].as<std::string>())) {
      if (k != "auto" && k != "fused" && k != "explicit")
        throw std::invalid_argument("--attention: expected auto, fused or explicit, got '" + k + "'");
      kernels.push_back(k);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_train: " << e.what() << "\n";
    return 2;
  }
  const int64_t threads = r["threads"].as<int64_t>();
  if (threads > 0) torch::set_num_threads(static_cast<int>(threads));
  const std::string work = r["work-dir"].as<std::string>();
  fs::create_directories(work);
  std::string src = r["src"].as<std::string>(), tgt = r["tgt"].as<std::string>();
  if (!fs::exists(src)) {
    std::cerr << src << " not found (run tools/get_data.sh); using the bundled sample\n";
    src = "data/sample.de";
    tgt = "data/sample.en";
  }
  const std::string spm = work + "/spm";
  if (!fs::exists(spm + ".model")) {
    VocabTrainingOptions v;
    v.inputs = {src, tgt};
    v.model_prefix = spm;
    v.vocab_size = src.find("sample") == std::string::npos ? 8000 : 400;
    train_bpe_vocab(v);
  }
  Tokenizer tok = Tokenizer::load(spm + ".model");
  CorpusOptions co;
  auto corpus = load_parallel_corpus(src, tgt, tok, tok, co);
  BatcherOptions bo;
  bo.batch_tokens = r["batch-tokens"].as<int64_t>();
  TokenBatcher batcher(corpus, bo);
  at::Tensor corpus_columns;  // --output-columns corpus: the pieces of the targets, and the special ids
  if (r["output-columns"].as<std::string>() == "corpus") corpus_columns = target_ids({&corpus}, tok.vocab_size(), SpecialIds{});
  const int64_t warmup = r["warmup"].as<int64_t>();
  std::vector<Batch> valid = take(batcher, 8);  // held out: never trained on below
  const std::vector<Batch> valid_on_device = on_device(valid, device);
  const std::string script = (fs::path(argv[0]).parent_path() / "../tools/bench/train_reference.py").string();
  const std::string py_script = fs::exists(script) ? script : "tools/bench/train_reference.py";
  const double peak = r["peak-tflops"].as<double>() * 1e12;

  std::printf("bench_train: %s, device %s, %d CPU threads, batch_tokens %lld, native CPU bf16: %s\n", src.c_str(),
              device.str().c_str(), torch::get_num_threads(), static_cast<long long>(bo.batch_tokens),
              cpu_has_native_bf16() ? "yes" : "no");
  // Only the dtypes asked: on a CPU without native bf16 its matmul is ATen's scalar fallback (minutes).
  std::map<c10::ScalarType, double> ceiling_gflops;  // GFLOP/s of each requested dtype's matmul
  std::string ceilings;
  for (const auto& name : split(r["dtypes"].as<std::string>())) {
    const auto dtype = resolve_dtype(name, device);
    if (ceiling_gflops.count(dtype)) continue;
    const double gflops = ceiling_gflops[dtype] = matmul_gflops(dtype, device);
    char figure[64];
    std::snprintf(figure, sizeof figure, "%s%s %.0f GFLOP/s", ceilings.empty() ? "" : ", ", dtype_name(dtype).c_str(),
                  gflops);
    ceilings += figure;
  }
  if (ceiling_gflops.count(torch::kFloat) && ceiling_gflops.count(torch::kBFloat16)) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, " = %.2fx", ceiling_gflops[torch::kBFloat16] / ceiling_gflops[torch::kFloat]);
    ceilings += ratio;
  }
  std::printf("matmul ceiling measured here: %s%s\n", ceilings.c_str(),
              peak > 0 ? (", datasheet peak given: " + std::to_string(static_cast<int64_t>(peak / 1e12)) + " TFLOP/s")
                             .c_str()
                       : "");
  std::printf("MFU = model FLOPs/s / peak; 'mfu/ceil' divides by the measured matmul ceiling of the dtype instead\n");
  std::printf("%-6s %-5s %-9s %6s %12s %12s %7s %7s %9s %11s %11s\n", "preset", "dtype", "python", "steps",
              "ours tok/s", "python tok/s", "ratio", "MFU", "mfu/ceil", "ours vloss", "py vloss");
  for (const auto& preset : split(r["presets"].as<std::string>())) {
    ModelConfig config = ModelConfig::preset(preset);
    config.src_vocab_size = config.tgt_vocab_size = tok.vocab_size();
    const int64_t steps = preset == "small" || preset == "tiny" ? r["steps"].as<int64_t>() : r["base-steps"].as<int64_t>();
    std::vector<Batch> batches = take(batcher, warmup + steps);
    const std::string blob = work + "/" + preset + "_batches.pt";
    if (!r.count("no-python")) save_for_python(blob, config, batches, valid);
    const std::vector<Batch> device_batches = on_device(batches, device);
    double fp32_rate = 0, fp32_loss = 0;
    for (const auto& dtype_name : split(r["dtypes"].as<std::string>())) {
      const auto dtype = resolve_dtype(dtype_name, device);
      const std::string profile_dir = r["profile"].as<std::string>();
      if (!profile_dir.empty()) fs::create_directories(profile_dir);
      const std::string trace =
          profile_dir.empty() ? "" : profile_dir + "/" + preset + "_" + dtype_name + ".trace.json";
      for (size_t k = 1; k < kernels.size(); ++k) {  // the alternatives, then the first kernel below
        set_attention_kernel(kernel_named(kernels[k]));
        Measured alt = run_ours(config, device_batches, warmup, valid_on_device, device, dtype, "");
        std::printf("%-6s %-5s attention %-8s %12.0f tok/s  MFU %.1f%%  vloss %.4f\n", preset.c_str(),
                    dtype_name.c_str(), kernels[k].c_str(), alt.tokens_per_sec,
                    peak > 0 ? 100 * alt.flops_per_sec / peak : 0.0, alt.valid_loss);
      }
      set_attention_kernel(kernel_named(kernels[0]));
      // The trace is of the configuration training runs: the corpus's columns where asked.
      Measured ours = run_ours(config, device_batches, warmup, valid_on_device, device, dtype,
                               corpus_columns.defined() ? "" : trace);
      const double ceiling = ceiling_gflops.at(dtype) * 1e9;
      const double mfu = peak > 0 ? ours.flops_per_sec / peak : 0.0;
      for (const auto& attention : r.count("no-python") ? std::vector<std::string>{"-"} : attentions) {
        Measured py;
        if (attention != "-") py = run_python(py_script, blob, dtype_name, warmup, threads, device, attention);
        std::printf("%-6s %-5s %-9s %6lld %12.0f %12.0f %6.2fx %6.1f%% %8.1f%% %11.4f %11.4f\n", preset.c_str(),
                    dtype_name.c_str(), attention.c_str(), static_cast<long long>(steps), ours.tokens_per_sec,
                    py.tokens_per_sec, py.tokens_per_sec > 0 ? ours.tokens_per_sec / py.tokens_per_sec : 0.0,
                    100 * mfu, 100 * ours.flops_per_sec / ceiling, ours.valid_loss, py.valid_loss);
        if (py.tokens_per_sec > 0 && peak > 0)
          std::printf("       python MFU %.1f%%\n", 100 * mfu * py.tokens_per_sec / ours.tokens_per_sec);
        std::fflush(stdout);
      }
      if (corpus_columns.defined()) {
        Measured part = run_ours(config, device_batches, warmup, valid_on_device, device, dtype, trace, corpus_columns);
        std::printf("%-6s %-5s output columns: %lld of %lld (the corpus's targets) %9.0f tok/s = %.2fx every "
                    "column's, vloss %.4f\n",
                    preset.c_str(), dtype_name.c_str(), static_cast<long long>(corpus_columns.sum().item<int64_t>()),
                    static_cast<long long>(corpus_columns.size(0)), part.tokens_per_sec,
                    part.tokens_per_sec / ours.tokens_per_sec, part.valid_loss);
      }
      if (dtype == torch::kFloat) {
        fp32_rate = ours.tokens_per_sec;
        fp32_loss = ours.valid_loss;
      } else if (fp32_rate > 0) {
        std::printf("       %s vs fp32 (ours): %.2fx speed, validation loss %+.2f%%\n", dtype_name.c_str(),
                    ours.tokens_per_sec / fp32_rate, 100.0 * (ours.valid_loss - fp32_loss) / fp32_loss);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
