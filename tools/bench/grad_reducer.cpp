// bench_grad_reducer: the gradient all-reduce of data-parallel training done two ways on the
// same model, batches and cores, in one run: torchmt's GradientReducer (our buckets on
// autograd hooks, the trainer's path) and c10d's Reducer (the engine of PyTorch's DDP, driven
// from C++ on the same Gloo transport), against no communication at all (each rank alone:
// the compute floor). Prints ms per update, target tokens/s and the all-reduce time not hidden
// behind backward (update time minus the floor's), and checks that both reducers leave every
// rank with the same weights (the floor must not: its ranks see different batches).
//
//   bench_grad_reducer [--nproc 2] [--preset small] [--steps 20] [--warmup 3] [--batch-tokens 4096]
//                      [--bucket-mb 25] [--src data/multi30k/train.de.gz --tgt …en.gz]
//
// Without WORLD_SIZE in the environment it starts --nproc local workers of itself (the
// trainer's launcher); with it (torchrun) it is one of them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <cxxopts.hpp>
#include <torch/torch.h>

#if __has_include(<gloo/algorithm.h>) && __has_include(<torch/csrc/distributed/c10d/reducer.hpp>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#define HAVE_C10D_REDUCER 1
#else
#define HAVE_C10D_REDUCER 0
#endif

#include "data/parallel_corpus.h"
#include "data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "io/checkpoint.h"
#include "training/gradient_reducer.h"
#include "training/process_group.h"
#include "training/training_step.h"
#include "training/worker_launcher.h"
#include "util/environment.h"
#include "kernels/cpu_isa.h"

using namespace torchmt;
namespace fs = std::filesystem;

namespace {

#if HAVE_C10D_REDUCER
// A c10d::ProcessGroup over a Gloo backend (the Reducer takes a ProcessGroup; Gloo is a
// Backend). Since 2.2-ish the group is (store, rank, size) plus setBackend; before, it took
// Options naming the backend. Templates so that only the form this LibTorch has is compiled.
template <typename PG = c10d::ProcessGroup>
c10::intrusive_ptr<PG> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                  const c10::intrusive_ptr<c10d::ProcessGroupGloo>& gloo) {
  if constexpr (std::is_constructible_v<PG, c10::intrusive_ptr<c10d::Store>, int, int>) {
    auto pg = c10::make_intrusive<PG>(store, rank, size);
    pg->setBackend(c10::DeviceType::CPU, PG::BackendType::GLOO, gloo);
    pg->setDefaultBackend(PG::BackendType::GLOO);
    return pg;
  } else {
    auto options = c10::make_intrusive<typename PG::Options>("gloo", std::chrono::milliseconds(60000));
    auto pg = c10::make_intrusive<PG>(store, rank, size, options);
    pg->setBackend(c10::DeviceType::CPU, PG::BackendType::GLOO, gloo);
    return pg;
  }
}

// The Reducer's constructor has changed across LibTorch releases (2.1-2.7: 10 arguments with
// an ignored per-bucket limit list third; 2.8: two flags more, that list gone; 2.13: a cap list
// and batched_grad_copy more). Picked at compile time.
template <typename R = c10d::Reducer>
std::shared_ptr<R> make_reducer(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> buckets,
                                std::vector<size_t> limits, c10::intrusive_ptr<c10d::ProcessGroup> pg, int64_t cap) {
  using V = std::vector<at::Tensor>;
  using B = std::vector<std::vector<size_t>>;
  using PG = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Names = std::unordered_map<size_t, std::string>;
  std::vector<bool> sparse(params.size(), false);
  const int64_t first_cap = 1 << 20;  // DDP's default first bucket
  if constexpr (std::is_constructible_v<R, V, B, PG, std::vector<bool>, int64_t, bool, bool, Names, int64_t, bool, bool,
                                        std::vector<int64_t>>) {
    return std::make_shared<R>(params, buckets, pg, sparse, cap, false, false, Names{}, first_cap, false, false,
                               std::vector<int64_t>{});
  } else if constexpr (std::is_constructible_v<R, V, B, PG, std::vector<bool>, int64_t, bool, bool, Names, int64_t,
                                               bool, bool>) {
    return std::make_shared<R>(params, buckets, pg, sparse, cap, false, false, Names{}, first_cap, false, false);
  } else {
    return std::make_shared<R>(params, buckets, limits, pg, sparse, cap, false, false, Names{}, first_cap);
  }
}
#endif

#if HAVE_C10D_REDUCER
// A communication hook that sums (the Reducer divides by the world size only when no hook is
// registered, and its built-in hooks divide too): .grad then holds the sum over the ranks, as
// with our hooks, so both reducers compute the same update.
class SumHook : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  using CppCommHookInterface::CppCommHookInterface;
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<at::Tensor> tensors{bucket.getBufferRef()};
    return state_->allreduce(tensors)->getFuture();
  }
};
#endif

struct Result {
  double seconds = 0;      // the slowest rank's, over the timed updates
  int64_t tokens = 0;      // global target tokens of the timed updates
  bool same_weights = false;  // every rank's weights equal rank 0's
  double fingerprint = 0;     // rank 0's weights
};

// A fingerprint of the weights that differs when any weight differs (sum of p * a fixed
// pseudo-random pattern), compared across ranks.
double fingerprint(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    auto flat = params[i].detach().reshape({-1}).to(torch::kDouble);  // [n]
    auto pattern = torch::sin(torch::arange(flat.numel(), torch::kDouble) * 0.7 + static_cast<double>(i));
    sum += (flat * pattern).sum().item<double>();
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  cxxopts::Options options("bench_grad_reducer", "data-parallel gradient all-reduce: our hooks vs c10d's Reducer");
  options.add_options()("nproc", "local workers to start (without WORLD_SIZE)",
                        cxxopts::value<int>()->default_value("2"))(
      "preset", "model preset", cxxopts::value<std::string>()->default_value("small"))(
      "steps", "timed updates per mode", cxxopts::value<int64_t>()->default_value("20"))(
      "warmup", "untimed updates first (c10d's first update runs with one bucket)",
      cxxopts::value<int64_t>()->default_value("3"))(
      "batch-tokens", "per rank", cxxopts::value<int64_t>()->default_value("4096"))(
      "bucket-mb", "bucket size cap, both reducers", cxxopts::value<double>()->default_value("25"))(
      "first-bucket-mb", "our hooks' first bucket (0: as the others)", cxxopts::value<double>()->default_value("0"))(
      "src", "training source", cxxopts::value<std::string>()->default_value("data/multi30k/train.de.gz"))(
      "tgt", "training target", cxxopts::value<std::string>()->default_value("data/multi30k/train.en.gz"))(
      "work-dir", "scratch directory (vocabulary, corpus cache)",
      cxxopts::value<std::string>()->default_value("/tmp/torchmt_bench_grad_reducer"))("h,help", "help");
  cxxopts::ParseResult r;
  try {
    r = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_grad_reducer: " << e.what() << "\n";
    return 2;
  }
  if (r.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  if (!distributed_available()) {
    std::cerr << "bench_grad_reducer: built without Gloo's headers (tools/setup.sh installs libgloo-dev)\n";
    return 1;
  }
  const std::string src = r["src"].as<std::string>(), tgt = r["tgt"].as<std::string>();
  for (const auto& f : {src, tgt})
    if (!fs::exists(f)) {
      std::cerr << "bench_grad_reducer: " << f << " not found (tools/get_data.sh)\n";
      return 1;
    }
  const std::string work = r["work-dir"].as<std::string>();
  const std::string spm = work + "/spm";
  if (!env_value("WORLD_SIZE")) {
    // The vocabulary once, before the workers start (they would race to write it).
    fs::create_directories(work);
    if (!fs::exists(spm + ".model")) {
      VocabTrainingOptions v;
      v.inputs = {src, tgt};
      v.model_prefix = spm;
      v.vocab_size = 8000;
      train_bpe_vocab(v);
    }
    const std::vector<std::string> args(argv, argv + argc);
    return launch_local_workers(r["nproc"].as<int>(), args);
  }

  const DistributedEnv env = DistributedEnv::from_environment();
  torch::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world_size));
  ProcessGroup group(env, std::chrono::seconds(120));
  const int rank = group.rank(), world = group.size();
  Tokenizer tok = Tokenizer::load(spm + ".model");
  CorpusOptions co;
  auto corpus = load_parallel_corpus(src, tgt, tok, tok, co);
  BatcherOptions bo;
  bo.batch_tokens = r["batch-tokens"].as<int64_t>();
  TokenBatcher batcher(corpus, bo);
  const int64_t warmup = r["warmup"].as<int64_t>(), steps = r["steps"].as<int64_t>();
  std::vector<Batch> batches;  // this rank's shard: batch i of the global order goes to rank i % world
  for (int64_t i = 0; i < (warmup + steps) * world; ++i) {
    if (i % world == rank)
      batches.push_back(batcher.next(torch::kCPU));
    else
      batcher.skip();
  }
  ModelConfig config = ModelConfig::preset(r["preset"].as<std::string>());
  config.src_vocab_size = config.tgt_vocab_size = tok.vocab_size();
  const int64_t cap = static_cast<int64_t>(r["bucket-mb"].as<double>() * 1024 * 1024);
  // c10d's reducer gets a store of its own, on a port rank 0 finds free.
  auto c10d_port = torch::full({1}, rank == 0 ? free_loopback_port() : 0, torch::kLong);
  group.broadcast({c10d_port}, 0);

  auto run = [&](const std::string& mode) {
    torch::manual_seed(1);  // the same initial weights on every rank
    Transformer model(config);
    auto params = unique_parameters(*model);
    AdamOptimizer optimizer(params, AdamOptions{});
    TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(0.1, 0), torch::kCPU, torch::kFloat, 1.0);
    std::unique_ptr<GradientReducer> ours;
#if HAVE_C10D_REDUCER
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
    c10::intrusive_ptr<c10d::ProcessGroup> pg;
    std::shared_ptr<c10d::Reducer> reducer;
#endif
    if (mode == "hooks") {
      ours = std::make_unique<GradientReducer>(params, group, cap, /*overlap=*/true,
                                               static_cast<int64_t>(r["first-bucket-mb"].as<double>() * 1024 * 1024));
      step.distribute(ours.get(), &group);
    } else if (mode == "c10d") {
#if HAVE_C10D_REDUCER
      // Its own store and Gloo context beside ours, as DDP would have.
      c10d::TCPStoreOptions so;
      so.port = static_cast<uint16_t>(c10d_port.item<int64_t>());
      so.isServer = rank == 0;
      so.numWorkers = static_cast<size_t>(world);
      so.waitWorkers = true;
      so.timeout = std::chrono::seconds(120);
      store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
      auto go = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, go);
      pg = make_group(store, rank, world, gloo);
      // As DDP with find_unused_parameters=false: buckets by size in reverse parameter order,
      // a small first one, then rebuilt once from the order gradients arrive in.
      std::vector<size_t> limits{static_cast<size_t>(1 << 20), static_cast<size_t>(cap)};
      auto [buckets, bucket_limits] = c10d::compute_bucket_assignment_by_size(params, limits);
      std::reverse(buckets.begin(), buckets.end());
      std::reverse(bucket_limits.begin(), bucket_limits.end());
      reducer = make_reducer(params, buckets, bucket_limits, pg, cap);
      reducer->register_comm_hook(std::make_unique<SumHook>(pg));
      // The loss and token count are summed over our group as with our hooks, so every rank
      // divides the summed gradients by the global token count: the same update.
      step.distribute(nullptr, &group);
#endif
    }
    std::optional<std::chrono::steady_clock::time_point> start;
    int64_t tokens = 0;
    for (int64_t i = 0; i < warmup + steps; ++i) {
      if (i == warmup) {
        group.barrier();
        start = std::chrono::steady_clock::now();
      }
#if HAVE_C10D_REDUCER
      if (reducer) {
        // DDP's per-step calls: forward bookkeeping, the one-time bucket rebuild (a
        // collective), then arm the autograd hooks; the reduction ends inside backward.
        reducer->prepare_for_forward();
        reducer->rebuild_buckets();
        reducer->prepare_for_backward({});
      }
#endif
      auto result = step.run({batches[static_cast<size_t>(i)]}, 1e-4);
      result.wait();
      if (i >= warmup) tokens += batches[static_cast<size_t>(i)].tgt_tokens;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
    auto totals = torch::zeros({3 * world}, torch::kDouble);  // [seconds | tokens | fingerprint] per rank
    totals[rank] = seconds;
    totals[world + rank] = static_cast<double>(tokens);
    totals[2 * world + rank] = fingerprint(params);
    group.all_reduce_sum(totals, "gathering the figures");
    Result out;
    out.seconds = totals.narrow(0, 0, world).max().item<double>();
    out.tokens = static_cast<int64_t>(totals.narrow(0, world, world).sum().item<double>());
    auto prints = totals.narrow(0, 2 * world, world);
    out.fingerprint = prints[0].item<double>();
    out.same_weights = (prints - prints[0]).abs().max().item<double>() <= 1e-9 * std::abs(prints[0].item<double>());
    return out;
  };

  std::vector<std::string> modes{"none", "hooks"};
  if (HAVE_C10D_REDUCER) modes.push_back("c10d");
  if (rank == 0)
    std::printf("bench_grad_reducer: %s, fp32, %d workers x %d threads, %lld timed updates of %lld batch tokens per "
                "worker, buckets %.0f MB\n%-7s %12s %13s %22s %14s\n",
                r["preset"].as<std::string>().c_str(), world, torch::get_num_threads(), static_cast<long long>(steps),
                static_cast<long long>(bo.batch_tokens), r["bucket-mb"].as<double>(), "reducer", "ms/update",
                "target tok/s", "all-reduce not hidden", "ranks agree");
  // "ranks agree": every rank has rank 0's weights after the updates (and c10d's = the hooks').
  double floor_ms = 0, hooks_fingerprint = 0;
  for (const auto& mode : modes) {
    Result res = run(mode);
    if (mode == "hooks") hooks_fingerprint = res.fingerprint;
    // c10d with the summing hook computes the hooks' update: their weights must agree too.
    if (mode == "c10d" && std::abs(res.fingerprint - hooks_fingerprint) > 1e-9 * std::abs(hooks_fingerprint))
      res.same_weights = false;
    const double ms = 1000 * res.seconds / static_cast<double>(steps);
    if (mode == "none") floor_ms = ms;
    if (rank == 0) {
      std::printf("%-7s %12.1f %13.0f %19.1f ms %14s\n", mode.c_str(), ms, static_cast<double>(res.tokens) / res.seconds,
                  mode == "none" ? 0.0 : ms - floor_ms,
                  res.same_weights ? "yes" : (mode == "none" ? "no (none)" : "NO"));
      std::fflush(stdout);
    }
    if (mode != "none" && !res.same_weights) {
      if (rank == 0)
        std::fprintf(stderr, "bench_grad_reducer: %s left the ranks with different weights (or not the hooks')\n",
                     mode.c_str());
      return 1;
    }
  }
  if (!HAVE_C10D_REDUCER && rank == 0) std::printf("c10d's reducer.hpp was not found: only our hooks measured\n");
  return 0;
}
