// bench_translate: decoding speed on test_2016_flickr (tools/get_data.sh first).
//   target tokens/s and sentences/s for greedy and beam search, batch sizes, fp32 / bf16 /
//   fp16 (CUDA) / int8, with the KV cache and with full recomputation of the prefix at every
//   step, and for the Python reference model (tests/reference/transformer_reference.py, same
//   weights) decoding the same way (tools/bench/translate_reference.py, with its own KV cache
//   by default; --python-cache recompute for the prefix recomputed at every step).
//   And CTranslate2 (the PyPI package, tools/bench/translate_ctranslate2.py) on the same weights,
//   exported by torchmt's CTranslate2 exporter (fp32 and int8), at its best worker x thread
//   setting, on the same sentences and cores.
//   Prints a table and the ratios: cache vs no-cache (goal >= 3x at beam 5), ours vs Python
//   (goal >= 1.5x at batch 1), ours vs CTranslate2 at the same precision (goal >= 1.2x), bf16 / fp16
//   vs fp32, and how often the outputs agree; and the model load times.
// Target tokens = hypothesis tokens + eos. Our timings go through Translator::translate
// (tokenization, length sorting, batching, search, detokenization); the Python side gets the
// encoded source ids from us, so its timings exclude tokenization.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include <unistd.h>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "torchmt/loading/model_loader.h"
#include "data/shortlist.h"
#include "data/text_file.h"
#include "util/atomic_file.h"
#include "torchmt/decoding/translator.h"
#include "export/exporter.h"
#include "io/checkpoint.h"
#include "kernels/primitives.h"
#include "bench_options.h"
#include "model/linear.h"
#include "torchmt/util/device.h"
#include "util/heap.h"
#include "kernels/cpu_isa.h"

namespace fs = std::filesystem;
using namespace torchmt;

namespace {

using Clock = std::chrono::steady_clock;
using Ids = std::vector<int64_t>;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

using bench::parse_ints;
using bench::split;

// "1,5" from {1, 5}; the same for strings: the lists the Python sides take.
template <typename T>
std::string join(const std::vector<T>& items) {
  std::ostringstream out;
  for (size_t i = 0; i < items.size(); ++i) out << (i ? "," : "") << items[i];
  return out.str();
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string search_name(int64_t beam) { return beam == 1 ? "greedy" : "beam " + std::to_string(beam); }

// One measured configuration.
struct Key {
  std::string impl;  // "torchmt", "python" or "ctranslate2"
  int64_t beam, batch;
  std::string dtype;
  bool cache;
  bool operator<(const Key& o) const {
    return std::tie(impl, beam, batch, dtype, cache) < std::tie(o.impl, o.beam, o.batch, o.dtype, o.cache);
  }
};

struct Measure {
  double seconds = 0;
  int64_t sentences = 0, tokens = 0;
  std::vector<Ids> hyps;  // best hypothesis per input sentence (no bos / eos)
  std::string setting;    // workers x threads per worker
  double sent_per_s() const { return seconds > 0 ? static_cast<double>(sentences) / seconds : 0; }
  double tok_per_s() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0; }
};

// Fraction of sentences with identical best hypotheses.
std::optional<double> agreement(const Measure& a, const Measure& b) {
  if (a.hyps.size() != b.hyps.size() || a.hyps.empty()) return std::nullopt;
  size_t same = 0;
  for (size_t i = 0; i < a.hyps.size(); ++i) same += a.hyps[i] == b.hyps[i];
  return static_cast<double>(same) / static_cast<double>(a.hyps.size());
}

Measure run_ours(Translator& translator, const std::vector<std::string>& lines, int64_t beam, int64_t batch,
                 bool cache, int64_t workers, bool early_exit, int64_t fixed_length) {
  TranslationOptions options;
  options.workers = workers;
  options.search.beam_size = beam;
  options.search.early_exit = early_exit;
  options.search.scores = false;  // as `translate` without n-best output
  if (fixed_length > 0) {  // one limit for every sentence, as CTranslate2's max_decoding_length
    options.search.max_len_a = 0;
    options.search.max_len_b = fixed_length;
  }
  options.batch_size = batch;
  options.use_cache = cache;
  // Warm-up (allocator, oneDNN primitives, autocast caches) on a few sentences.
  std::vector<std::string> warm(lines.begin(), lines.begin() + std::min<size_t>(lines.size(), 4));
  translator.translate(warm, options);

  Measure m;
  const auto start = Clock::now();
  auto out = translator.translate(lines, options);
  m.seconds = seconds_since(start);
  const auto plan = translator.plan_workers(options, (lines.size() + batch - 1) / batch);
  m.setting = std::to_string(plan.workers) + "x" + std::to_string(plan.threads_per_worker);
  for (const auto& t : out) {
    if (t.hypotheses.empty()) {  // empty source line
      m.hyps.emplace_back();
      continue;
    }
    m.hyps.push_back(t.hypotheses.front().tokens);
    m.tokens += static_cast<int64_t>(t.hypotheses.front().tokens.size()) + 1;
    ++m.sentences;
  }
  return m;
}

// Reads the results file written by translate_reference.py or translate_ctranslate2.py:
//   load DTYPE SECONDS                                     (CTranslate2 only)
//   config BEAM BATCH DTYPE SECONDS SENTENCES TOKENS [SETTING]
//   hyp INDEX token token ...    (for the config above, one line per input sentence; ids, or
//                                 pieces when `tokenizer` is given)
void read_peer_results(const std::string& path, const std::string& impl, size_t n_lines,
                       std::map<Key, Measure>& results, const Tokenizer* tokenizer,
                       std::map<std::string, double>* loads = nullptr) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the " + impl + " results '" + path + "'");
  std::string line;
  Measure* current = nullptr;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "load" && loads) {
      std::string dtype;
      double seconds = 0;
      fields >> dtype >> seconds;
      (*loads)[impl + " " + dtype] = seconds;
    } else if (kind == "config") {
      Key key{impl, 0, 0, "", false};
      Measure m;
      fields >> key.beam >> key.batch >> key.dtype >> m.seconds >> m.sentences >> m.tokens;
      if (!fields) throw std::runtime_error("malformed " + impl + " results line: " + line);
      fields >> m.setting;
      if (impl == "python") {  // its last field says how it decoded
        key.cache = m.setting == "kv";
        m.setting.clear();
      }
      m.hyps.assign(n_lines, Ids{});
      current = &(results[key] = std::move(m));
    } else if (kind == "hyp" && current) {
      size_t index = 0;
      fields >> index;
      if (index >= n_lines) throw std::runtime_error(impl + " results: sentence index out of range");
      std::string token;
      while (fields >> token)
        current->hyps[index].push_back(tokenizer ? tokenizer->piece_to_id(token) : std::stoll(token));
    }
  }
}

std::string fmt(double v, int precision) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  torchmt::use_shape_free_cuda_attention();
  cxxopts::Options options("bench_translate",
                           "Decoding speed: greedy / beam, batch sizes, fp32 / bf16, KV cache vs recomputation, "
                           "vs the Python reference model.");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  options.add_options()("m,model", "torchmt checkpoint",
                        cxxopts::value<std::string>()->default_value("runs/small_m30k/checkpoint_best.pt"))(
      "src", "source sentences (plain or .gz)",
      cxxopts::value<std::string>()->default_value("data/multi30k/test_2016_flickr.de.gz"))(
      "sentences", "first N source lines (0 = all)", cxxopts::value<int64_t>()->default_value("200"))(
      "beams", "beam sizes (1 = greedy)", cxxopts::value<std::string>()->default_value("1,4,5"))(
      "batch-sizes", "sentences per batch", cxxopts::value<std::string>()->default_value("1,64"))(
      "dtypes", "fp32, bf16 (autocast), fp16 (autocast, CUDA only) and/or int8 (translate --dtype int8)",
      cxxopts::value<std::string>()->default_value("fp32,bf16,int8"))(
      "threads", "intra-op threads (torch::set_num_threads)",
      cxxopts::value<int>()->default_value(std::to_string(cores)))(
      "device", "cpu, cuda, cuda:N", cxxopts::value<std::string>()->default_value("cpu"))(
      "no-uncached", "skip the runs without KV cache")("no-python", "skip the Python reference")(
      "python-beams", "beam sizes also run by the Python reference (those in --beams)",
      cxxopts::value<std::string>()->default_value("1,5"))(
      "python-cache", "the Python reference's decoding: kv (its own KV cache) or recompute (the whole prefix every step)",
      cxxopts::value<std::string>()->default_value("kv"))(
      "python", "Python interpreter", cxxopts::value<std::string>()->default_value("python3"))(
      "reference", "the Python reference decoder",
      cxxopts::value<std::string>()->default_value("tools/bench/translate_reference.py"))(
      "no-ctranslate2", "skip CTranslate2")(
      "ct2-dtypes", "CTranslate2 precisions: fp32 and/or int8 (its int8_float32)",
      cxxopts::value<std::string>()->default_value("fp32,int8"))(
      "ct2-settings", "CTranslate2 workers x threads to try (the fastest counts); default: Cx1,1xC for C threads",
      cxxopts::value<std::string>()->default_value(""))(
      "ct2-models", "CTranslate2 model directories to use instead of torchmt's export of -m: DTYPE=DIR,... "
      "(e.g. ct2-transformers-converter's output for an imported Marian model)",
      cxxopts::value<std::string>()->default_value(""))(
      "ct2-runner", "the CTranslate2 side",
      cxxopts::value<std::string>()->default_value("tools/bench/translate_ctranslate2.py"))(
      "onnx-models", "also ONNX Runtime (tools/onnx_translate.py's search) on `torchmt export --format onnx` "
      "directories of -m: DTYPE=DIR,... (fp32, and int8 for an export made with --calibrate)",
      cxxopts::value<std::string>()->default_value(""))(
      "onnx-runner", "the ONNX Runtime side",
      cxxopts::value<std::string>()->default_value("tools/bench/translate_onnxruntime.py"))(
      "shortlist", "also run every cached configuration with this `torchmt shortlist` table (right after the run "
      "without), and print the speed-ups", cxxopts::value<std::string>()->default_value(""))(
      "workers", "torchmt workers (0 = its default for each job)", cxxopts::value<int64_t>()->default_value("0"))(
      "early-exit",
      "torchmt's beam search ends a sentence when its best candidate ends it (OpenNMT-py's criterion; "
      "not like for like: CTranslate2, as torchmt by default, runs until beam-size hypotheses are finished)")(
      "fixed-length",
      "one length limit of N tokens on both sides (torchmt: max length N instead of 1.2 * source + 10; "
      "CTranslate2: max_decoding_length N): like for like when a model loops, and every sentence runs N steps "
      "when its outputs never end (random weights); 0 = off",
      cxxopts::value<int64_t>()->default_value("0"))(
      "rounds",
      "measure torchmt and CTranslate2 this many times (each configuration: torchmt, then CTranslate2), "
      "and keep each configuration's fastest: a shared machine's speed drifts between runs",
      cxxopts::value<int>()->default_value("1"))(
      "h,help", "show this help");
  cxxopts::ParseResult r;
  try {
    r = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_translate: " << e.what() << "\n";
    return 2;
  }
  if (r.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  std::vector<int64_t> beams, batches, python_beams;
  std::vector<std::string> dtypes;
  c10::Device device(c10::kCPU);
  try {
    beams = parse_ints(r["beams"].as<std::string>(), "beams");
    batches = parse_ints(r["batch-sizes"].as<std::string>(), "batch-sizes");
    for (int64_t b : parse_ints(r["python-beams"].as<std::string>(), "python-beams"))
      if (std::count(beams.begin(), beams.end(), b)) python_beams.push_back(b);
    dtypes = split(r["dtypes"].as<std::string>(), ',');
    for (const auto& d : dtypes)
      if (d != "fp32" && d != "bf16" && d != "fp16" && d != "int8")
        throw std::invalid_argument("--dtypes: expected fp32, bf16, fp16 and/or int8, got '" + d + "'");
    if (dtypes.empty()) throw std::invalid_argument("--dtypes is empty");
    const auto python_cache = r["python-cache"].as<std::string>();
    if (python_cache != "kv" && python_cache != "recompute")
      throw std::invalid_argument("--python-cache: expected kv or recompute, got '" + python_cache + "'");
    if (r["threads"].as<int>() < 1) throw std::invalid_argument("--threads must be at least 1");
    if (r["sentences"].as<int64_t>() < 0) throw std::invalid_argument("--sentences must be >= 0");
    if (r["rounds"].as<int>() < 1) throw std::invalid_argument("--rounds must be at least 1");
    if (r["fixed-length"].as<int64_t>() < 0) throw std::invalid_argument("--fixed-length must be >= 0");
    device = resolve_device(r["device"].as<std::string>());
    if (std::count(dtypes.begin(), dtypes.end(), "fp16") && !device.is_cuda())
      throw std::invalid_argument("--dtypes fp16 decodes on CUDA only (use bf16 on the CPU)");
  } catch (const std::exception& e) {
    std::cerr << "bench_translate: " << e.what() << "\n";
    return 2;
  }
  const bool uncached = !r.count("no-uncached");
  const bool python = !r.count("no-python") && !python_beams.empty();
  const bool python_kv = r["python-cache"].as<std::string>() == "kv";
  const bool ct2 = !r.count("no-ctranslate2");
  const auto ct2_dtypes = split(r["ct2-dtypes"].as<std::string>(), ',');
  const int threads = r["threads"].as<int>();
  const int64_t fixed_length = r["fixed-length"].as<int64_t>();
  const std::string model_path = r["model"].as<std::string>();
  const std::string src_path = r["src"].as<std::string>();
  fs::path work;

  try {
    torch::set_num_threads(threads);
    if (!fs::exists(model_path))
      throw std::runtime_error("checkpoint '" + model_path + "' not found (train one, or pass --model)");
    if (!fs::exists(src_path)) throw std::runtime_error("'" + src_path + "' not found: run tools/get_data.sh first");
    auto lines = read_lines(src_path);
    const auto n = r["sentences"].as<int64_t>();
    if (n > 0 && static_cast<size_t>(n) < lines.size()) lines.resize(static_cast<size_t>(n));
    if (lines.empty()) throw std::runtime_error("'" + src_path + "' has no lines");

    const auto load_start = Clock::now();
    Translator fp32 = load_translator(model_path, device, torch::kFloat);
    // Prepared as `translate` prepares it (load_translator): packed weights, the greedy screen.
    if (device.is_cpu())
      prepare_linears_for_inference(*fp32.model(), InferencePrecision::kFloat, &fp32.model()->fc_out);
    std::map<std::string, double> loads{{"torchmt checkpoint", seconds_since(load_start)}};
    Translator bf16(fp32.model(), fp32.src_tokenizer(), fp32.tgt_tokenizer(), device, torch::kBFloat16);
    Translator fp16(fp32.model(), fp32.src_tokenizer(), fp32.tgt_tokenizer(), device, torch::kHalf);
    std::optional<Translator> int8;  // its own copy of the model: the int8 weights live in its layers
    if (std::count(dtypes.begin(), dtypes.end(), "int8")) {
      int8.emplace(load_translator(model_path, device, torch::kFloat));
      prepare_linears_for_inference(*int8->model(), InferencePrecision::kInt8);
    }
    // As `torchmt translate` runs (translate_command.cpp): after the load, large tensor buffers
    // from the reusing pool (heap.h), not a fresh mapping (and its page faults) per buffer.
    use_cpu_tensor_pool();
    const auto& cfg = fp32.model()->config();
    int64_t params = 0;
    for (const auto& p : unique_parameters(*fp32.model())) params += p.numel();
    int64_t src_tokens = 0;
    std::vector<Ids> sources;
    for (const auto& line : lines) {
      sources.push_back(line.find_first_not_of(" \t\r") == std::string::npos ? Ids{} : fp32.encode_source(line));
      src_tokens += static_cast<int64_t>(sources.back().size());
    }

    std::cout << "bench_translate: " << model_path << " (d_model " << cfg.d_model << ", " << cfg.num_encoder_layers
              << "+" << cfg.num_decoder_layers << " layers, " << cfg.num_heads << " heads, d_ff " << cfg.d_ff
              << ", vocab " << cfg.tgt_vocab_size << ", " << fmt(static_cast<double>(params) / 1e6, 2)
              << "M parameters)\n"
              << "source: " << src_path << ", first " << lines.size() << " sentences (" << src_tokens
              << " source tokens incl. eos)\n"
              << "device " << device.str() << ", " << threads << " threads (" << cores << " hardware threads), "
              << "native CPU bf16: " << (cpu_has_native_bf16() ? "yes" : "no") << ", LibTorch " << TORCH_VERSION
              << "\n"
              << "length penalty 0.6, max length "
              << (fixed_length > 0 ? std::to_string(fixed_length) + " on both sides"
                      : std::string("1.2 * source length + 10 (CTranslate2: 256)"))
              << "; tokens = hypothesis tokens + eos\n"
              << "torchmt beam search ends a sentence "
              << (r.count("early-exit") ? "when its best candidate ends it (--early-exit: beam rows NOT like for "
                                          "like, CTranslate2 waits for beam-size finished hypotheses)\n"
                                        : "with beam-size finished hypotheses, as CTranslate2 (patience 1)\n")
              << (ct2 ? "CTranslate2 runs each configuration right after torchmt's run of it\n" : "")
              << (r["rounds"].as<int>() > 1 ? "each configuration's fastest of " + std::to_string(r["rounds"].as<int>()) +
                                                  " rounds\n"
                                            : std::string())
              << "\n"
              << std::flush;

    std::shared_ptr<const Shortlist> shortlist;
    if (!r["shortlist"].as<std::string>().empty())
      shortlist = std::make_shared<const Shortlist>(
          Shortlist::load(r["shortlist"].as<std::string>(), fp32.src_tokenizer(), fp32.tgt_tokenizer()));
    std::map<Key, Measure> results;
    std::vector<Key> order;
    const int rounds = r["rounds"].as<int>();
    // A configuration's fastest round counts (its outputs are the same in every round).
    auto keep_fastest = [&](const Key& key, Measure m) {
      auto it = results.find(key);
      if (it == results.end() || m.seconds < it->second.seconds) results[key] = std::move(m);
    };

    // CTranslate2's model directories and input, made once for every round.
    std::string ct2_command, ct2_out_path;
    std::map<std::string, std::string> ct2_models;  // dtype -> model directory
    if (ct2) {
      work = fs::temp_directory_path() / ("torchmt_bench_ct2_" + std::to_string(::getpid()));
      fs::create_directories(work);
      const auto pieces_path = (work / "source_pieces.txt").string();
      ct2_out_path = (work / "ct2_results.txt").string();
      for (const auto& spec : split(r["ct2-models"].as<std::string>(), ',')) {
        const auto eq = spec.find('=');
        if (eq == std::string::npos || !fs::is_directory(spec.substr(eq + 1)))
          throw std::invalid_argument("--ct2-models: expected DTYPE=DIRECTORY, got '" + spec + "'");
        ct2_models[spec.substr(0, eq)] = spec.substr(eq + 1);
      }
      // torchmt's exports append the end themselves (add_source_eos); a converter's output may
      // expect it among the pieces (ct2-transformers-converter for Marian).
      bool eos_in_pieces = false;
      for (const auto& [dtype, dir] : ct2_models) {
        std::ifstream config(dir + "/config.json");
        const std::string text((std::istreambuf_iterator<char>(config)), std::istreambuf_iterator<char>());
        eos_in_pieces = eos_in_pieces || text.find("\"add_source_eos\": false") != std::string::npos;
      }
      {
        std::ofstream out(pieces_path);
        for (const auto& s : sources) {
          const size_t n = eos_in_pieces ? s.size() : s.size() - 1;
          for (size_t j = 0; j < n; ++j) out << (j ? " " : "") << fp32.src_tokenizer().id_to_piece(s[j]);
          out << "\n";
        }
        if (!out) throw std::runtime_error("cannot write " + pieces_path);
      }
      auto checkpoint = load_checkpoint(model_path, torch::kCPU);
      auto exporter = make_exporter("ctranslate2");
      for (const auto& dtype : ct2_dtypes) {
        if (dtype != "fp32" && dtype != "int8") throw std::invalid_argument("--ct2-dtypes: expected fp32 and/or int8");
        if (ct2_models.count(dtype)) continue;  // given
        ExportOptions export_options;
        export_options.quantize_int8 = dtype == "int8";
        const auto dir = (work / ("ct2_" + dtype)).string();
        exporter->write(checkpoint, export_options, dir);
        ct2_models[dtype] = dir;
      }
      std::string settings = r["ct2-settings"].as<std::string>();
      if (settings.empty()) settings = std::to_string(threads) + "x1" + (threads > 1 ? ",1x" + std::to_string(threads) : "");
      ct2_command = shell_quote(r["python"].as<std::string>()) + " " + shell_quote(r["ct2-runner"].as<std::string>()) +
                    " --pieces " + shell_quote(pieces_path) + " --out " + shell_quote(ct2_out_path) + " --settings " +
                    settings;
      if (fixed_length > 0) ct2_command += " --max-decoding-length " + std::to_string(fixed_length);
    }
    // A peer (CTranslate2, ONNX Runtime) on one configuration, right after torchmt's run of it: a
    // shared machine's speed drifts over minutes (this project's 2-core EPYC: the same torchmt run
    // 17.9 s one day, 34.2 s another; CTranslate2 19.7 vs 28.5), so each ratio compares runs
    // seconds apart. `command` writes the runner's results to `out_path`.
    auto run_peer = [&](const std::string& impl, const std::string& command, const std::string& out_path) {
      std::cerr << impl << ": " << command << "\n" << std::flush;
      std::cout << std::flush;
      fs::remove(out_path);
      const int rc = std::system(command.c_str());
      if (rc != 0) throw std::runtime_error("the " + impl + " side failed (exit status " + std::to_string(rc) + ")");
      std::map<Key, Measure> peer;
      std::map<std::string, double> peer_loads;
      read_peer_results(out_path, impl, lines.size(), peer, &fp32.tgt_tokenizer(), &peer_loads);
      for (auto& [key, m] : peer) keep_fastest(key, std::move(m));
      for (const auto& [what, seconds] : peer_loads)
        if (!loads.count(what) || seconds < loads[what]) loads[what] = seconds;
    };
    auto run_ct2 = [&](int64_t beam, int64_t batch, const std::string& dtype) {
      run_peer("ctranslate2",
               ct2_command + " --beams " + std::to_string(beam) + " --batch-sizes " + std::to_string(batch) +
                   " --model " + dtype + "=" + shell_quote(ct2_models.at(dtype)),
               ct2_out_path);
    };

    // ONNX Runtime: its export directories (given) and input (pieces without the end).
    std::map<std::string, std::string> onnx_models;  // dtype -> export directory
    fs::path onnx_work;
    std::string onnx_command, onnx_out_path;
    for (const auto& spec : split(r["onnx-models"].as<std::string>(), ',')) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos || !fs::is_regular_file(spec.substr(eq + 1) + "/encoder.onnx"))
        throw std::invalid_argument("--onnx-models: expected DTYPE=DIRECTORY of an ONNX export, got '" + spec + "'");
      onnx_models[spec.substr(0, eq)] = spec.substr(eq + 1);
    }
    if (!onnx_models.empty()) {
      onnx_work = fs::temp_directory_path() / ("torchmt_bench_onnx_" + std::to_string(::getpid()));
      fs::create_directories(onnx_work);
      const auto pieces_path = (onnx_work / "source_pieces.txt").string();
      onnx_out_path = (onnx_work / "onnx_results.txt").string();
      std::ofstream out(pieces_path);
      for (const auto& s : sources) {  // without the end, which the runner appends
        for (size_t j = 0; j + 1 < s.size(); ++j) out << (j ? " " : "") << fp32.src_tokenizer().id_to_piece(s[j]);
        out << "\n";
      }
      if (!out) throw std::runtime_error("cannot write " + pieces_path);
      onnx_command = shell_quote(r["python"].as<std::string>()) + " " + shell_quote(r["onnx-runner"].as<std::string>()) +
                     " --pieces " + shell_quote(pieces_path) + " --out " + shell_quote(onnx_out_path) + " --threads " +
                     std::to_string(threads);
    }
    auto run_onnx = [&](int64_t beam, int64_t batch, const std::string& dtype) {
      run_peer("onnxruntime",
               onnx_command + " --beams " + std::to_string(beam) + " --batch-sizes " + std::to_string(batch) +
                   " --model " + dtype + "=" + shell_quote(onnx_models.at(dtype)),
               onnx_out_path);
    };

    for (int round = 0; round < rounds; ++round) {
      if (rounds > 1) std::cerr << "round " << round + 1 << " of " << rounds << "\n";
      for (const auto& dtype : dtypes)
        for (int64_t beam : beams)
          for (int64_t batch : batches)
            for (bool cache : {true, false}) {
              if (!cache && !uncached) continue;
              Key key{"torchmt", beam, batch, dtype, cache};
              std::cerr << "torchmt " << search_name(beam) << ", batch " << batch << ", " << dtype << ", "
                        << (cache ? "cache" : "no cache") << " ..." << std::flush;
              Translator& translator = dtype == "bf16"   ? bf16
                                       : dtype == "fp16" ? fp16
                                       : dtype == "int8" ? *int8
                                                         : fp32;
              const kernels::ScreenStats before = kernels::screen_stats();
              Measure m = run_ours(translator, lines, beam, batch, cache, r["workers"].as<int64_t>(),
                                   r.count("early-exit") > 0, fixed_length);
              std::cerr << " " << fmt(m.seconds, 2) << " s\n";
              const kernels::ScreenStats after = kernels::screen_stats();
              if (const int64_t rows = after.rows - before.rows; rows > 0)  // warm-up included
                std::cerr << "  screened projection: " << rows << " rows, "
                          << fmt(100.0 * static_cast<double>(after.open_rows - before.open_rows) / rows, 2)
                          << "% left to the full row, "
                          << fmt(static_cast<double>(after.fp32_logits - before.fp32_logits) / rows, 1)
                          << " fp32 logits per row\n";
              keep_fastest(key, std::move(m));
              if (round == 0) order.push_back(key);
              if (shortlist && cache) {
                std::cerr << "  with the shortlist ..." << std::flush;
                translator.set_shortlist(shortlist);
                Measure s = run_ours(translator, lines, beam, batch, cache, r["workers"].as<int64_t>(),
                                     r.count("early-exit") > 0, fixed_length);
                translator.set_shortlist(nullptr);
                std::cerr << " " << fmt(s.seconds, 2) << " s\n";
                const Key shortlisted{"shortlist", beam, batch, dtype, true};
                keep_fastest(shortlisted, std::move(s));
                if (round == 0) order.push_back(shortlisted);
              }
              if (cache && ct2 && ct2_models.count(dtype)) run_ct2(beam, batch, dtype);
              if (cache && onnx_models.count(dtype)) run_onnx(beam, batch, dtype);
            }
      if (ct2)  // CTranslate2's precisions that torchmt does not run here
        for (const auto& dtype : ct2_dtypes)
          if (!std::count(dtypes.begin(), dtypes.end(), dtype))
            for (int64_t beam : beams)
              for (int64_t batch : batches) run_ct2(beam, batch, dtype);
    }
    if (ct2) {
      remove_tree(work.string());
      work.clear();
    }
    if (!onnx_work.empty()) remove_tree(onnx_work.string());

    if (python) {
      work = fs::temp_directory_path() / ("torchmt_bench_translate_" + std::to_string(::getpid()));
      fs::create_directories(work);
      const auto ids_path = (work / "source_ids.txt").string();
      const auto out_path = (work / "python_results.txt").string();
      {
        std::ofstream ids(ids_path);
        for (const auto& s : sources) {
          for (size_t j = 0; j < s.size(); ++j) ids << (j ? " " : "") << s[j];
          ids << "\n";
        }
        if (!ids) throw std::runtime_error("cannot write " + ids_path);
      }
      std::vector<std::string> python_dtypes;  // the reference has no int8
      for (const auto& d : dtypes)
        if (d != "int8") python_dtypes.push_back(d);
      const std::string command =
          shell_quote(r["python"].as<std::string>()) + " " + shell_quote(r["reference"].as<std::string>()) +
          " --model " + shell_quote(model_path) + " --ids " + shell_quote(ids_path) + " --out " +
          shell_quote(out_path) + " --beams " + join(python_beams) + " --batch-sizes " + join(batches) + " --dtypes " +
          join(python_dtypes) + " --threads " + std::to_string(threads) + " --device " + shell_quote(device.str()) +
          " --cache " + (python_kv ? "kv" : "recompute");
      std::cerr << "python: " << command << "\n" << std::flush;
      std::cout << std::flush;
      const int rc = std::system(command.c_str());
      if (rc != 0) throw std::runtime_error("the Python reference failed (exit status " + std::to_string(rc) + ")");
      read_peer_results(out_path, "python", lines.size(), results, nullptr);
      for (const auto& dtype : python_dtypes)
        for (int64_t beam : python_beams)
          for (int64_t batch : batches) {
            Key key{"python", beam, batch, dtype, python_kv};
            if (!results.count(key)) throw std::runtime_error("the Python reference did not report " +
                                                              search_name(beam) + " batch " + std::to_string(batch) +
                                                              " " + dtype);
            order.push_back(key);
          }
      remove_tree(work.string());
      work.clear();
    }

    if (ct2)
      for (const auto& dtype : ct2_dtypes)
        for (int64_t beam : beams)
          for (int64_t batch : batches) {
            Key key{"ctranslate2", beam, batch, dtype, false};
            if (!results.count(key)) throw std::runtime_error("CTranslate2 did not report " + search_name(beam) +
                                                              " batch " + std::to_string(batch) + " " + dtype);
            order.push_back(key);
          }

    for (const auto& [dtype, dir] : onnx_models)
      for (int64_t beam : beams)
        for (int64_t batch : batches) {
          Key key{"onnxruntime", beam, batch, dtype, false};
          if (!results.count(key)) throw std::runtime_error("ONNX Runtime did not report " + search_name(beam) +
                                                            " batch " + std::to_string(batch) + " " + dtype +
                                                            " (is " + dtype + " in --dtypes?)");
          order.push_back(key);
        }

    // ---- table --------------------------------------------------------------------
    // "agree": sentences whose best hypothesis equals torchmt's cached run of the same
    // search / batch / dtype (a check that all implementations decode the same way).
    std::cout << std::left << std::setw(12) << "impl" << std::setw(8) << "search" << std::right << std::setw(6)
              << "batch" << std::setw(6) << "dtype" << std::setw(10) << "cache" << std::setw(10) << "seconds"
              << std::setw(10) << "sent/s" << std::setw(10) << "tok/s" << std::setw(8) << "tokens" << std::setw(8)
              << "agree" << std::setw(8) << "setting" << "\n";
    for (const auto& key : order) {
      const Measure& m = results.at(key);
      std::string agree = "-";
      if (key.impl != "torchmt" || !key.cache) {
        auto it = results.find(Key{"torchmt", key.beam, key.batch, key.dtype, true});
        if (it != results.end())
          if (auto a = agreement(m, it->second)) agree = fmt(100.0 * *a, 1) + "%";
      }
      std::cout << std::left << std::setw(12) << key.impl << std::setw(8) << search_name(key.beam) << std::right
                << std::setw(6) << key.batch << std::setw(6) << key.dtype << std::setw(10)
                << ((key.impl == "torchmt" || key.impl == "python") && !key.cache ? "recompute" : "kv")
                << std::setw(10)
                << fmt(m.seconds, 2) << std::setw(10) << fmt(m.sent_per_s(), 2) << std::setw(10)
                << fmt(m.tok_per_s(), 1) << std::setw(8) << m.tokens << std::setw(8) << agree << std::setw(8)
                << (m.setting.empty() ? "-" : m.setting) << "\n";
    }

    // ---- ratios (wall-time speed-ups on the same sentences) -------------------------
    auto speedup = [&](const Key& fast, const Key& slow) -> std::optional<double> {
      auto a = results.find(fast), b = results.find(slow);
      if (a == results.end() || b == results.end() || a->second.seconds <= 0) return std::nullopt;
      return b->second.seconds / a->second.seconds;
    };
    auto verdict = [](double v, double goal) { return v >= goal ? "  [goal met]" : "  [goal NOT met]"; };

    std::cout << "\nratios are wall-time speed-ups on the same " << lines.size() << " sentences\n";
    if (uncached) {
      std::cout << "KV cache vs recomputation (goal >= 3x at beam 5):\n";
      for (const auto& dtype : dtypes)
        for (int64_t beam : beams)
          for (int64_t batch : batches)
            if (auto s = speedup({"torchmt", beam, batch, dtype, true}, {"torchmt", beam, batch, dtype, false}))
              std::cout << "  " << std::left << std::setw(8) << search_name(beam) << std::right << " batch "
                        << std::setw(3) << batch << " " << dtype << ": " << fmt(*s, 2) << "x"
                        << (beam == 5 ? verdict(*s, 3.0) : "") << "\n";
    }
    if (python) {
      std::cout << "torchmt (KV cache) vs Python reference (" << (python_kv ? "its KV cache" : "recomputing")
                << "; goal >= 1.5x at batch 1):\n";
      for (const auto& dtype : dtypes)
        for (int64_t beam : beams)
          for (int64_t batch : batches)
            if (auto s = speedup({"torchmt", beam, batch, dtype, true}, {"python", beam, batch, dtype, python_kv})) {
              std::cout << "  " << std::left << std::setw(8) << search_name(beam) << std::right << " batch "
                        << std::setw(3) << batch << " " << dtype << ": " << fmt(*s, 2) << "x"
                        << (batch == 1 ? verdict(*s, 1.5) : "");
              if (uncached)
                if (auto u = speedup({"torchmt", beam, batch, dtype, false}, {"python", beam, batch, dtype, python_kv}))
                  std::cout << "   (torchmt recompute vs Python: " << fmt(*u, 2) << "x)";
              std::cout << "\n";
            }
    }
    if (shortlist) {
      std::cout << "torchmt with the shortlist vs without (goal >= 1.25x at greedy batch 64; same-output agreement "
                   "in brackets):\n";
      for (const auto& dtype : dtypes)
        for (int64_t beam : beams)
          for (int64_t batch : batches) {
            const Key with{"shortlist", beam, batch, dtype, true}, without{"torchmt", beam, batch, dtype, true};
            if (auto s = speedup(with, without)) {
              auto a = agreement(results.at(with), results.at(without));
              std::cout << "  " << std::left << std::setw(8) << search_name(beam) << std::right << " batch "
                        << std::setw(3) << batch << " " << dtype << ": " << fmt(*s, 2) << "x  ["
                        << (a ? fmt(100.0 * *a, 1) + "% same" : "-") << "]"
                        << (beam == 1 && batch == 64 ? verdict(*s, 1.25) : "") << "\n";
            }
          }
    }
    if (ct2) {
      std::cout << "torchmt vs CTranslate2, same weights, sentences and cores (> 1 = torchmt faster; goal >= 1.2x "
                   "at the same precision):\n";
      for (const auto& dtype : ct2_dtypes)
        for (int64_t beam : beams)
          for (int64_t batch : batches) {
            const Key peer{"ctranslate2", beam, batch, dtype, false};
            std::cout << "  " << std::left << std::setw(8) << search_name(beam) << std::right << " batch " << std::setw(3)
                      << batch << " " << dtype << ": ";
            if (auto s = speedup({"torchmt", beam, batch, dtype, true}, peer))
              std::cout << fmt(*s, 2) << "x"
                        << (beam > 1 && r.count("early-exit") ? "  [--early-exit: not the goal's comparison]"
                                                             : verdict(*s, 1.2));
            else
              std::cout << "torchmt has no " << dtype << " run";
            if (dtype != "fp32")
              if (auto s = speedup({"torchmt", beam, batch, "fp32", true}, peer))
                std::cout << "   (torchmt fp32 vs CTranslate2 " << dtype << ": " << fmt(*s, 2) << "x)";
            std::cout << "\n";
          }
    }
    if (!onnx_models.empty()) {
      std::cout << "torchmt vs ONNX Runtime (its graphs, tools/onnx_translate.py's search), same weights, sentences and "
                   "threads (> 1 = torchmt faster):\n";
      for (const auto& [dtype, dir] : onnx_models)
        for (int64_t beam : beams)
          for (int64_t batch : batches) {
            const Key peer{"onnxruntime", beam, batch, dtype, false};
            std::cout << "  " << std::left << std::setw(8) << search_name(beam) << std::right << " batch " << std::setw(3)
                      << batch << " " << dtype << ": ";
            if (auto s = speedup({"torchmt", beam, batch, dtype, true}, peer)) std::cout << fmt(*s, 2) << "x";
            if (dtype != "fp32")
              if (auto s = speedup(peer, {"onnxruntime", beam, batch, "fp32", false}))
                std::cout << "   (ONNX Runtime " << dtype << " speed against its fp32: " << fmt(*s, 2) << "x)";
            std::cout << "\n";
          }
    }
    std::cout << "model load (in process):";
    for (const auto& [what, seconds] : loads) std::cout << "  " << what << " " << fmt(seconds, 3) << " s";
    std::cout << "\n";
    for (const std::string half : {"bf16", "fp16"}) {
      if (!std::count(dtypes.begin(), dtypes.end(), "fp32") || !std::count(dtypes.begin(), dtypes.end(), half)) continue;
      std::cout << half << " vs fp32 (> 1 = " << half << " faster; same-output agreement in brackets):\n";
      for (const std::string impl : {"torchmt", "python"})
        for (int64_t beam : beams)
          for (int64_t batch : batches)
            for (bool cache : {true, false}) {
              const Key b{impl, beam, batch, half, cache}, f{impl, beam, batch, "fp32", cache};
              if (auto s = speedup(b, f)) {
                auto a = agreement(results.at(b), results.at(f));
                std::cout << "  " << std::left << std::setw(8) << impl << std::setw(8) << search_name(beam)
                          << std::right << " batch " << std::setw(3) << batch << " "
                          << (cache ? "kv       " : "recompute") << ": " << fmt(*s, 2) << "x  ["
                          << (a ? fmt(100.0 * *a, 1) + "% same" : "-") << "]\n";
              }
            }
    }
    if (python) {
      // The sanity check: greedy fp32 must give the same token ids in C++ and Python.
      for (int64_t batch : batches) {
        auto ours = results.find({"torchmt", 1, batch, "fp32", true});
        auto ref = results.find({"python", 1, batch, "fp32", python_kv});
        if (ours == results.end() || ref == results.end()) continue;
        auto a = agreement(ours->second, ref->second);
        std::cout << "greedy fp32 batch " << batch << ": torchmt and Python produce identical token ids for "
                  << (a ? fmt(100.0 * *a, 1) : "-") << "% of sentences\n";
      }
    }
  } catch (const std::exception& e) {
    if (!work.empty()) remove_tree(work.string());
    std::cerr << "bench_translate: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
