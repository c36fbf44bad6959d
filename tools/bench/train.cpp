// bench_train: target tokens/s of a training update, torchmt against the Python reference
// model (tests/reference) on the same batches, the same initial weights and the same
// optimizer/recipe, for each preset and dtype; plus the validation loss after the same
// number of steps (bf16 must stay within 2% of fp32).
//
//   bench_train [--presets small,base] [--dtypes fp32,bf16] [--steps 20] [--base-steps 6]
//               [--profile DIR]   (a Chrome trace of 3 more updates per run; summarise it with
//                                  tools/bench/profile_summary.py)
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include "torchmt/data/parallel_corpus.h"
#include "torchmt/data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/training/inverse_sqrt_schedule.h"
#include "torchmt/training/training_step.h"
#include "torchmt/util/device.h"
#include "torchmt/util/flat_config.h"

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
};

std::vector<Batch> take(TokenBatcher& batcher, int64_t n) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(batcher.next(torch::kCPU));
  return out;
}

// GFLOP/s of a [2048, 512] x [512, 2048] matmul in `dtype`: the ceiling a training step's
// matmuls can reach here, so that the bf16 / fp32 step ratio can be read against it.
double matmul_gflops(c10::ScalarType dtype) {
  auto a = torch::randn({2048, 512}).to(dtype), b = torch::randn({512, 2048}).to(dtype);
  for (int i = 0; i < 3; ++i) torch::mm(a, b);
  const int repeats = 20;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) torch::mm(a, b);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * 2048 * 512 * 2048 * repeats / seconds / 1e9;
}

// Runs `batches` through `step` under LibTorch's (Kineto) profiler and writes a Chrome trace.
void profile_updates(TrainingStep& step, const std::vector<Batch>& batches, const std::string& trace_path) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/true);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  for (const Batch& b : batches) step.run({b}, 1e-4);
  torch::autograd::profiler::disableProfiler()->save(trace_path);
}

Measured run_ours(const ModelConfig& config, const std::vector<Batch>& batches, int64_t warmup,
                  const std::vector<Batch>& valid, c10::ScalarType dtype, const std::string& trace_path) {
  torch::manual_seed(1);
  Transformer model(config);
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  InverseSqrtSchedule schedule(1.0, config.d_model, 4000);
  TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(0.1, 0), torch::kCPU, dtype, 1.0);
  int64_t tokens = 0;
  double seconds = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = step.run({batches[i]}, schedule.lr(static_cast<int64_t>(i) + 1));
    if (static_cast<int64_t>(i) >= warmup) {
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      tokens += r.tokens;
    }
  }
  Measured measured{tokens / seconds, evaluate_nll(model, valid, torch::kCPU, dtype)};
  if (!trace_path.empty()) {
    const size_t n = std::min<size_t>(3, batches.size());
    profile_updates(step, std::vector<Batch>(batches.end() - static_cast<std::ptrdiff_t>(n), batches.end()), trace_path);
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
                    int64_t threads) {
  const std::string cmd = "python3 " + script + " " + blob + " " + dtype + " " + std::to_string(warmup) + " " +
                          std::to_string(threads);
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
  cxxopts::Options options("bench_train", "Training throughput: torchmt vs the Python reference model.");
  options.add_options()("src", "training source", cxxopts::value<std::string>()->default_value("data/multi30k/train.de.gz"))(
      "tgt", "training target", cxxopts::value<std::string>()->default_value("data/multi30k/train.en.gz"))(
      "presets", "comma-separated presets", cxxopts::value<std::string>()->default_value("small,base"))(
      "dtypes", "comma-separated dtypes", cxxopts::value<std::string>()->default_value("fp32,bf16"))(
      "steps", "timed updates per run (small)", cxxopts::value<int64_t>()->default_value("20"))(
      "base-steps", "timed updates per run for base/big", cxxopts::value<int64_t>()->default_value("6"))(
      "warmup", "untimed updates first", cxxopts::value<int64_t>()->default_value("2"))(
      "batch-tokens", "rows x (source + target) tokens per batch, padding included", cxxopts::value<int64_t>()->default_value("4096"))(
      "threads", "CPU threads (0 = all)", cxxopts::value<int64_t>()->default_value("0"))(
      "work-dir", "scratch directory", cxxopts::value<std::string>()->default_value("/tmp/torchmt_bench_train"))(
      "profile", "write a Chrome trace of 3 extra updates per run into this directory",
      cxxopts::value<std::string>()->default_value(""))("no-python", "skip the Python reference")("h,help", "help");
  auto r = options.parse(argc, argv);
  if (r.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
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
  co.cache_dir = work;
  auto corpus = load_parallel_corpus(src, tgt, tok, tok, co);
  BatcherOptions bo;
  bo.batch_tokens = r["batch-tokens"].as<int64_t>();
  TokenBatcher batcher(corpus, bo);
  const int64_t warmup = r["warmup"].as<int64_t>();
  std::vector<Batch> valid = take(batcher, 8);  // held out: never trained on below
  const std::string script = (fs::path(argv[0]).parent_path() / "../tools/bench/train_reference.py").string();
  const std::string py_script = fs::exists(script) ? script : "tools/bench/train_reference.py";

  std::printf("bench_train: %s, %d threads, batch_tokens %lld, bf16 native: %s\n", src.c_str(), torch::get_num_threads(),
              static_cast<long long>(bo.batch_tokens), cpu_has_native_bf16() ? "yes" : "no");
  const double fp32_gflops = matmul_gflops(torch::kFloat), bf16_gflops = matmul_gflops(torch::kBFloat16);
  std::printf("matmul ceiling (2048x512x2048): fp32 %.0f GFLOP/s, bf16 %.0f GFLOP/s = %.2fx\n", fp32_gflops,
              bf16_gflops, bf16_gflops / fp32_gflops);
  std::printf("%-6s %-5s %6s %14s %14s %7s %12s %12s\n", "preset", "dtype", "steps", "ours tok/s", "python tok/s",
              "ratio", "ours vloss", "py vloss");
  for (const auto& preset : split(r["presets"].as<std::string>())) {
    ModelConfig config = ModelConfig::preset(preset);
    config.src_vocab_size = config.tgt_vocab_size = tok.vocab_size();
    const int64_t steps = preset == "small" || preset == "tiny" ? r["steps"].as<int64_t>() : r["base-steps"].as<int64_t>();
    std::vector<Batch> batches = take(batcher, warmup + steps);
    const std::string blob = work + "/" + preset + "_batches.pt";
    if (!r.count("no-python")) save_for_python(blob, config, batches, valid);
    double fp32_rate = 0, fp32_loss = 0;
    for (const auto& dtype_name : split(r["dtypes"].as<std::string>())) {
      const auto dtype = resolve_dtype(dtype_name, torch::kCPU);
      const std::string profile_dir = r["profile"].as<std::string>();
      if (!profile_dir.empty()) fs::create_directories(profile_dir);
      const std::string trace =
          profile_dir.empty() ? "" : profile_dir + "/" + preset + "_" + dtype_name + ".trace.json";
      Measured ours = run_ours(config, batches, warmup, valid, dtype, trace);
      Measured py;
      if (!r.count("no-python")) py = run_python(py_script, blob, dtype_name, warmup, threads);
      std::printf("%-6s %-5s %6lld %14.0f %14.0f %6.2fx %12.4f %12.4f\n", preset.c_str(), dtype_name.c_str(),
                  static_cast<long long>(steps), ours.tokens_per_sec, py.tokens_per_sec,
                  py.tokens_per_sec > 0 ? ours.tokens_per_sec / py.tokens_per_sec : 0.0, ours.valid_loss, py.valid_loss);
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
