// bench_export: what `torchmt export` produces and what it costs to load.
//   checkpoint size (training, with optimizer state; and weights-only) vs the .ts size
//   for fp32, bf16 and frozen fp32; load time of checkpoint vs .ts (median of --repeats);
//   translation of N sentences (--source, plain or .gz): the checkpoint vs the export through
//   the same Translator and search (what `torchmt translate` does for either file) and the
//   export's in-archive search (what Python users call): time and identical outputs.
// Reads --checkpoint (copied to a temp dir first, so a training run may keep writing it);
// without one, a fresh `small` model with the sample BPE vocabulary.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <tuple>
#include <sstream>

#include <unistd.h>

#include <cxxopts.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include "torchmt/data/tokenizer.h"
#include "util/atomic_file.h"
#include "util/integrity.h"
#include "torchmt/decoding/translator.h"
#include "export/exporter.h"
#include "data/text_file.h"
#include "torchmt/loading/model_loader.h"
#include "io/checkpoint.h"
#include "torchmt/util/device.h"
#include "kernels/cpu_isa.h"

namespace fs = std::filesystem;
using namespace torchmt;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <typename F>
double median_seconds(int repeats, F&& f) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::string mib(const std::string& path) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << static_cast<double>(fs::file_size(path)) / (1024.0 * 1024.0) << " MiB";
  return out.str();
}

}  // namespace

static int run(int argc, char** argv) {
  cxxopts::Options options("bench_export", "Export size and load time");
  options.add_options()("checkpoint", "checkpoint to export (copied first)",
                        cxxopts::value<std::string>()->default_value(""))(
      "repeats", "load repetitions", cxxopts::value<int>()->default_value("5"))(
      "sentences", "sample sentences to translate", cxxopts::value<int>()->default_value("50"))(
      "source", "source sentences", cxxopts::value<std::string>()->default_value("data/sample.de"))(
      "threads", "torch intra-op threads (0 = default)", cxxopts::value<int>()->default_value("0"));
  auto args = options.parse(argc, argv);
  if (args["threads"].as<int>() > 0) torch::set_num_threads(args["threads"].as<int>());
  const int repeats = args["repeats"].as<int>();

  std::string checkpoint = args["checkpoint"].as<std::string>();
  if (!checkpoint.empty() && !fs::exists(checkpoint))
    throw std::runtime_error("checkpoint '" + checkpoint + "' not found (leave --checkpoint out for a fresh model)");
  const fs::path dir = fs::temp_directory_path() / ("torchmt_bench_export_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  if (!checkpoint.empty()) {
    fs::copy_file(checkpoint, dir / "checkpoint.pt", fs::copy_options::overwrite_existing);
    std::cout << "checkpoint: " << checkpoint << " (copied)\n";
  } else {
    std::cout << "checkpoint: fresh `small` model, sample vocabulary\n";
    VocabTrainingOptions vo;
    vo.inputs = {"data/sample.de", "data/sample.en"};
    vo.model_prefix = (dir / "spm").string();
    vo.vocab_size = 1000;
    train_bpe_vocab(vo);
    Tokenizer tok = Tokenizer::load(vo.model_prefix + ".model");
    ModelConfig config = ModelConfig::preset("small");
    config.src_vocab_size = config.tgt_vocab_size = tok.vocab_size();
    CheckpointMeta meta;
    meta.model = config;
    meta.src_spm_model = meta.tgt_spm_model = tok.serialized();
    save_checkpoint((dir / "checkpoint.pt").string(), Transformer(config), nullptr, meta);
  }
  checkpoint = (dir / "checkpoint.pt").string();

  auto loaded = load_checkpoint(checkpoint, torch::kCPU);
  const std::string weights_only = (dir / "weights_only.pt").string();
  save_checkpoint(weights_only, loaded.model, nullptr, loaded.meta);
  auto exporter = make_exporter("torchscript");
  const std::string fp32 = (dir / "model.ts").string(), bf16 = (dir / "model_bf16.ts").string(),
                    frozen = (dir / "model_frozen.ts").string();
  ExportOptions o;
  double export_s = median_seconds(1, [&] { exporter->write(loaded, o, fp32); });
  o.dtype = torch::kBFloat16;
  exporter->write(loaded, o, bf16);
  o.dtype = torch::kFloat;
  o.freeze = true;
  exporter->write(loaded, o, frozen);

  const auto& c = loaded.meta.model;
  std::cout << "model: d_model " << c.d_model << ", " << c.num_encoder_layers << "+" << c.num_decoder_layers
            << " layers, vocab " << c.src_vocab_size << ", " << count_parameters(loaded.model) << " parameters, step "
            << loaded.meta.position.step << "\n"
            << "size: checkpoint " << mib(checkpoint) << " | weights-only checkpoint " << mib(weights_only)
            << " | .ts fp32 " << mib(fp32) << " | .ts bf16 " << mib(bf16) << " | .ts fp32 frozen " << mib(frozen)
            << "\n"
            << "export time (fp32): " << std::fixed << std::setprecision(3) << export_s << " s\n";

  auto load_ckpt = median_seconds(repeats, [&] { load_checkpoint(checkpoint, torch::kCPU); });
  auto load_ts = median_seconds(repeats, [&] { torch::jit::load(fp32, torch::kCPU); });
  auto load_bf16 = median_seconds(repeats, [&] { torch::jit::load(bf16, torch::kCPU); });
  auto load_frozen = median_seconds(repeats, [&] { torch::jit::load(frozen, torch::kCPU); });
  auto load_st = median_seconds(repeats, [&] { load_translator(fp32, torch::kCPU, torch::kFloat); });
  std::cout << "load (median of " << repeats << "): checkpoint " << load_ckpt << " s | torch::jit::load fp32 "
            << load_ts << " s | bf16 " << load_bf16 << " s | frozen " << load_frozen
            << " s | load_translator (load + tokenizer) " << load_st << " s\n";
  // What integrity costs: verifying the CRC-32C seal of the file already in memory, against
  // the whole load (issue goal: < 5%).
  // (The weights-only checkpoint: written here, so sealed even when --checkpoint is older.)
  const double load_weights = median_seconds(repeats, [&] { load_checkpoint(weights_only, torch::kCPU); });
  for (const auto& [name_, path_, whole] :
       {std::tuple<std::string, std::string, double>{"checkpoint", weights_only, load_weights},
        {"export fp32", fp32, load_st}}) {
    const std::string &name = name_, &path = path_;  // a lambda may not capture a structured binding (C++17)
    const std::string bytes = read_file(path);
    const double verify = median_seconds(repeats, [&] { verify_zip_seal(bytes, name, path); });
    std::cout << "seal check " << name << " (" << bytes.size() / (1 << 20) << " MiB): " << verify * 1e3 << " ms = "
              << 100.0 * verify / whole << "% of its load (" << whole << " s)\n";
  }

  std::vector<std::string> lines = read_lines(args["source"].as<std::string>());
  if (static_cast<int>(lines.size()) > args["sentences"].as<int>()) lines.resize(args["sentences"].as<int>());
  if (!lines.empty()) {
    Translator native = load_translator(checkpoint, torch::kCPU, torch::kFloat);
    ExportedModel exported(fp32, torch::kCPU);
    Translator scripted = make_translator(exported, torch::kFloat);
    for (int64_t beam : {1, 5}) {
      TranslationOptions to;
      to.search.beam_size = beam;
      std::vector<std::string> a, b, c;
      auto native_s = median_seconds(1, [&] { a = native.translate_text(lines, to); });
      auto script_s = median_seconds(1, [&] { b = scripted.translate_text(lines, to); });
      // The in-archive search, batched as Translator batches (64 sentences, longest first).
      auto archive_s = median_seconds(1, [&] {
        std::vector<size_t> order;
        std::vector<std::vector<int64_t>> src(lines.size());
        for (size_t i = 0; i < lines.size(); ++i)
          if (lines[i].find_first_not_of(" \t\r") != std::string::npos) {
            src[i] = scripted.encode_source(lines[i]);
            order.push_back(i);
          }
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return src[x].size() > src[y].size(); });
        c.assign(lines.size(), "");
        for (size_t begin = 0; begin < order.size(); begin += 64) {
          const size_t end = std::min(order.size(), begin + 64);
          auto batch = torch::zeros({static_cast<int64_t>(end - begin), static_cast<int64_t>(src[order[begin]].size())},
                                    torch::kLong);  // [B, S], pad 0
          for (size_t r = begin; r < end; ++r)
            for (size_t j = 0; j < src[order[r]].size(); ++j)
              batch[static_cast<int64_t>(r - begin)][static_cast<int64_t>(j)] = src[order[r]][j];
          auto hyps = exported.translate_in_archive(batch, to.search);
          for (size_t r = begin; r < end; ++r) c[order[r]] = exported.target_tokenizer().decode(hyps[r - begin][0].tokens);
        }
      });
      int same = 0, same_archive = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        same += a[i] == b[i];
        same_archive += b[i] == c[i];
      }
      std::cout << "translate " << lines.size() << " sentences, beam " << beam << ": checkpoint " << native_s
                << " s | export " << script_s << " s | export in-archive search " << archive_s
                << " s | checkpoint = export on " << same << "/" << lines.size() << " | export = in-archive on "
                << same_archive << "/" << lines.size() << "\n";
    }
  }
  remove_tree(dir.string());
  return 0;
}

// Bad input (a missing file, a wrong flag, a corrupt checkpoint) ends in one line naming it, not in
// std::terminate.
int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  torchmt::use_shape_free_cuda_attention();
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_export: " << e.what() << "\n";
    return 1;
  }
}
