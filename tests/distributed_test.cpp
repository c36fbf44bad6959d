// Data parallelism on c10d/Gloo: the gradient reducer and the training step with two ranks
// (threads of this process, each with its own process group over loopback), and
// `torchmt train --nproc-per-node 2` end to end (equivalence with one worker, exact resume on
// any number of workers, a worker that dies or hangs).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "data_test_support.h"
#include "data/parallel_corpus.h"
#include "torchmt/data/special_ids.h"
#include "data/token_batcher.h"
#include "io/checkpoint.h"
#include "training/adam_optimizer.h"
#include "training/gradient_reducer.h"
#include "training/process_group.h"
#include "training/training_step.h"
#include "training/worker_launcher.h"

namespace torchmt {
namespace {

namespace fs = std::filesystem;

int free_port() { return free_loopback_port(); }

DistributedEnv loopback(int rank, int world, int port) {
  DistributedEnv env;
  env.present = true;
  env.rank = rank;
  env.world_size = world;
  env.local_world_size = world;
  env.local_rank = rank;
  env.master_port = port;
  return env;
}

// Two batches' rows as one batch (padded to the longer of each side).
Batch merge(const Batch& a, const Batch& b) {
  auto pad_cat = [](const at::Tensor& x, const at::Tensor& y) {
    const int64_t len = std::max(x.size(1), y.size(1));
    auto widen = [&](const at::Tensor& t) {
      return torch::constant_pad_nd(t, {0, len - t.size(1)}, kPadId);  // [rows, len]
    };
    return torch::cat({widen(x), widen(y)}, 0);
  };
  Batch m;
  m.src = pad_cat(a.src, b.src);
  m.tgt_in = pad_cat(a.tgt_in, b.tgt_in);
  m.tgt_out = pad_cat(a.tgt_out, b.tgt_out);
  m.src_tokens = a.src_tokens + b.src_tokens;
  m.tgt_tokens = a.tgt_tokens + b.tgt_tokens;
  return m;
}

ModelConfig distributed_config(const std::string& variant = "paper") {
  ModelConfig c = ModelConfig::preset("tiny");
  c.src_vocab_size = c.tgt_vocab_size = test::sample_tokenizer().vocab_size();
  c.dropout = 0.0;  // one worker and two draw different masks otherwise
  c.pad_id = kPadId;
  if (variant == "modern") {  // the modern preset's switches: Pre-LN, RoPE, grouped-query attention
    c.norm = Norm::kPre;
    c.positions = Positions::kRope;
    c.kv_heads = 2;
  } else if (variant == "moe") {
    c.ffn = Ffn::kMoe;
    c.experts = 4;
    c.top_k = 2;
  }
  return c;
}

Transformer copy_of(const Transformer& source) {
  Transformer m(source->config());
  torch::NoGradGuard no_grad;
  auto theirs = source->named_parameters();
  for (auto& p : m->named_parameters()) p.value().copy_(theirs[p.key()]);
  return m;
}

void expect_same_weights(const Transformer& a, const Transformer& b, double tolerance, const std::string& what) {
  auto pb = b->named_parameters();
  for (const auto& p : a->named_parameters()) {
    const double diff = (p.value() - pb[p.key()]).abs().max().item<double>();
    EXPECT_LE(diff, tolerance) << what << ": " << p.key();
  }
}

// Adam whose step is proportional to the gradient (eps 1 dominates sqrt(v) for these
// gradients). With the recipe's eps 1e-9 Adam scales any gradient component to an lr-sized
// step, rounding noise included: where two summation orders (one padded batch vs two) leave
// 1e-9 of noise on a component that is ~0 in exact arithmetic, the weights then differ by
// ~lr (seen: 9e-6 on a cross-attention key weight on an Intel Xeon, not on an AMD EPYC).
// Proportional steps keep rounding noise at rounding size while a wrong gradient (a missing
// rank, a wrong normaliser) still moves the weights by ~lr x gradient, far above 1e-6.
AdamOptions proportional_adam() {
  AdamOptions o;
  o.eps = 1.0;
  return o;
}
constexpr double kEquivalenceLr = 1e-2;

// K updates of the same data three ways: one process with both batches as micro-batches
// (--update-freq 2), one process with both batches' rows in one batch, and two ranks with one
// batch each (small buckets, so several all-reduces overlap backward). For the paper's model
// and for the model switches (modern: Pre-LN + RoPE + GQA; a mixture of experts with its
// load-balancing loss, whose batch statistics make it equal to --update-freq 2, where each
// micro-batch has its own, and not to one merged batch).
class DataParallelVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(DataParallelVariant, TwoRanksUpdateLikeOneProcessWithBothBatches) {
  if (!distributed_available()) GTEST_SKIP() << "built without Gloo's headers";
  static const EncodedCorpus corpus =
      load_parallel_corpus(test::sample_de(), test::sample_en(), test::sample_tokenizer(), test::sample_tokenizer(), {});
  TokenBatcher batcher(corpus, {400, 3, true});
  constexpr int kUpdates = 4;
  std::vector<std::array<Batch, 2>> data;
  for (int u = 0; u < kUpdates; ++u) data.push_back({batcher.next(torch::kCPU), batcher.next(torch::kCPU)});

  const bool moe = GetParam() == "moe";
  torch::manual_seed(5);
  Transformer start(distributed_config(GetParam()));
  auto train = [&](Transformer model, const std::function<std::vector<Batch>(int)>& batches,
                   GradientReducer* reducer, ProcessGroup* group, AdamOptimizer& opt) {
    TrainingStep step(model, opt, LabelSmoothedCrossEntropy(0.1, kPadId), torch::kCPU, torch::kFloat, 1.0);
    step.distribute(reducer, group);
    if (moe) step.set_moe_aux_loss(0.01);
    double loss = 0;
    for (int u = 0; u < kUpdates; ++u) {
      StepResult r = step.run(batches(u), kEquivalenceLr);
      r.wait();
      EXPECT_TRUE(r.applied);
      loss += r.loss;
    }
    return loss;
  };

  Transformer accumulated = copy_of(start);
  AdamOptimizer opt_a(unique_parameters(*accumulated), proportional_adam());
  const double loss_a = train(accumulated, [&](int u) { return std::vector<Batch>{data[u][0], data[u][1]}; }, nullptr,
                              nullptr, opt_a);
  Transformer merged = copy_of(start);
  AdamOptimizer opt_m(unique_parameters(*merged), proportional_adam());
  train(merged, [&](int u) { return std::vector<Batch>{merge(data[u][0], data[u][1])}; }, nullptr, nullptr, opt_m);

  const int port = free_port();
  std::vector<Transformer> ranks{copy_of(start), copy_of(start)};
  std::vector<double> rank_loss(2);
  std::vector<int64_t> buckets(2);
  auto run_rank = [&](int rank) {
    ProcessGroup group(loopback(rank, 2, port), std::chrono::seconds(60));
    AdamOptimizer opt(unique_parameters(*ranks[rank]), proportional_adam());
    GradientReducer reducer(unique_parameters(*ranks[rank]), group, 64 * 1024, /*overlap=*/true);
    buckets[rank] = reducer.buckets();
    rank_loss[rank] = train(ranks[rank], [&](int u) { return std::vector<Batch>{data[u][rank]}; }, &reducer, &group,
                            opt);
  };
  auto other = std::async(std::launch::async, run_rank, 1);
  run_rank(0);
  other.get();

  EXPECT_GT(buckets[0], 3);
  // The loss reported is the job's (both ranks'), the same on each rank.
  EXPECT_NEAR(rank_loss[0], loss_a, 1e-3 * std::abs(loss_a));
  EXPECT_EQ(rank_loss[0], rank_loss[1]);
  expect_same_weights(ranks[0], ranks[1], 0.0, "rank 0 vs rank 1");
  expect_same_weights(ranks[0], accumulated, 1e-6, "two ranks vs --update-freq 2");
  if (!moe) expect_same_weights(ranks[0], merged, 1e-6, "two ranks vs one batch of both");
  // The comparison can fail: the weights did move by far more than the tolerance.
  double moved = 0;
  auto initial = start->named_parameters();
  for (const auto& p : ranks[0]->named_parameters())
    moved = std::max(moved, (p.value() - initial[p.key()]).abs().max().item<double>());
  EXPECT_GT(moved, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Variants, DataParallelVariant, ::testing::Values("paper", "modern", "moe"),
                         [](const auto& info) { return info.param; });

// Without overlap the same sums arrive after backward. A parameter without a gradient on one
// rank has its bucket carry zeros there rather than hang, and gets the others' sum; one without
// a gradient on any rank keeps none, so the optimizer skips it as one process would.
TEST(DataParallel, ReducerWithoutOverlapAndWithAParameterWithoutGradient) {
  if (!distributed_available()) GTEST_SKIP() << "built without Gloo's headers";
  const int port = free_port();
  std::vector<at::Tensor> sums(2);
  auto run_rank = [&](int rank) {
    ProcessGroup group(loopback(rank, 2, port), std::chrono::seconds(60));
    auto used = torch::ones({3}, torch::requires_grad());
    auto unused = torch::ones({2}, torch::requires_grad());
    // {bucket bytes, first bucket bytes, buckets}: in reverse order on_rank_0 (8 bytes),
    // unused (8), used (12); a small first bucket as DDP's.
    const std::vector<std::array<int64_t, 3>> layouts{{8, 0, 3}, {64, 0, 1}, {64, 8, 2}};
    for (const auto& [bucket_bytes, first_bytes, buckets] : layouts)
    for (bool overlap : {false, true}) {
      auto on_rank_0 = torch::ones({2}, torch::requires_grad());
      GradientReducer reducer({used, unused, on_rank_0}, group, bucket_bytes, overlap, first_bytes);
      EXPECT_EQ(reducer.buckets(), buckets);
      reducer.arm();
      auto loss = (used * static_cast<float>(rank + 1)).sum();
      if (rank == 0) loss = loss + on_rank_0.sum() * 5.0f;
      loss.backward();
      reducer.finish();
      EXPECT_TRUE(torch::equal(used.grad(), torch::full({3}, 3.0f))) << "overlap " << overlap;
      EXPECT_FALSE(unused.grad().defined()) << "overlap " << overlap;
      ASSERT_TRUE(on_rank_0.grad().defined()) << "rank " << rank;
      EXPECT_TRUE(torch::equal(on_rank_0.grad(), torch::full({2}, 5.0f)));
      used.mutable_grad().zero_();
    }
    EXPECT_TRUE(group.all_true(true));
    EXPECT_FALSE(group.all_true(rank == 0));
    std::string bytes = rank == 0 ? std::string("sp\0model", 8) : "";
    group.broadcast_bytes(bytes, 0);
    EXPECT_EQ(bytes, std::string("sp\0model", 8));
  };
  auto other = std::async(std::launch::async, run_rank, 1);
  run_rank(0);
  other.get();
}

TEST(DataParallel, EnvironmentVariablesAreCheckedWithOneLineErrors) {
  ::unsetenv("WORLD_SIZE");
  EXPECT_FALSE(DistributedEnv::from_environment().present);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "5", 1);
  try {
    DistributedEnv::from_environment();
    ADD_FAILURE() << "RANK 5 of 4 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("RANK=5"), std::string::npos) << e.what();
  }
  ::setenv("RANK", "3", 1);
  ::setenv("MASTER_PORT", "http", 1);
  EXPECT_THROW(DistributedEnv::from_environment(), std::invalid_argument);
  ::setenv("MASTER_PORT", "29511", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  const auto env = DistributedEnv::from_environment();
  EXPECT_TRUE(env.present);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_port, 29511);
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_PORT", "LOCAL_WORLD_SIZE"}) ::unsetenv(v);
}

// TORCHMT_DIST_BACKEND is checked before a rank joins: a bad value, or nccl on the CPU, is a
// one-line error rather than a rank the others wait for.
TEST(DataParallel, BackendChoiceIsCheckedBeforeJoining) {
  if (!distributed_available()) GTEST_SKIP() << "built without Gloo's headers";
  ::setenv("TORCHMT_DIST_BACKEND", "mpi", 1);
  EXPECT_THROW(ProcessGroup(loopback(0, 1, free_port()), std::chrono::seconds(5)), std::invalid_argument);
  ::setenv("TORCHMT_DIST_BACKEND", "nccl", 1);
  EXPECT_THROW(ProcessGroup(loopback(0, 1, free_port()), std::chrono::seconds(5), torch::kCPU), std::invalid_argument);
  ::setenv("TORCHMT_DIST_BACKEND", "gloo", 1);
  ProcessGroup group(loopback(0, 1, free_port()), std::chrono::seconds(5));
  EXPECT_EQ(group.backend(), "Gloo");
  ::unsetenv("TORCHMT_DIST_BACKEND");
}

// --- the command ---------------------------------------------------------------------------

std::string train_command(const test::TempDir& dir, const std::string& out, const std::string& extra) {
  return test::torchmt_binary() + " train --train-src " + test::sample_de() + " --train-tgt " + test::sample_en() +
         " --spm " + test::sample_spm_path() +
         " --preset tiny --dtype fp32 --device cpu --batch-tokens 600 --warmup 50 --keep-last 0 --log-every 1000 "
         "--out " +
         dir.file(out) + " " + extra;
}

TEST(TrainCommand, TwoWorkersTrainAsOneWithUpdateFreq2AndResumeOnAnyNumberOfWorkers) {
  if (!distributed_available()) GTEST_SKIP() << "built without Gloo's headers";
  test::TempDir dir;
  auto run = [&](const std::string& out, const std::string& extra) {
    auto r = test::run_command(train_command(dir, out, extra));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  // One thread per worker, as the one-worker run: with more (8 each on a 16-core machine) the
  // CPU kernels sum in another order, and Adam magnifies that in weights with tiny gradients
  // (4e-3 apart after 6 updates, seen on a GPU machine's CPU).
  const std::string two = run("two", "--dropout 0 --max-steps 6 --nproc-per-node 2 --bucket-mb 0.1 --threads 1");
  EXPECT_NE(two.find("data parallel: 2 workers"), std::string::npos) << two;
  EXPECT_EQ(two.find("step 6"), two.rfind("step 6")) << "one worker reports, not both:\n" << two;
  run("one", "--dropout 0 --max-steps 6 --update-freq 2 --threads 1");
  auto a = load_checkpoint(dir.file("two/checkpoint_last.pt"), torch::kCPU);
  auto b = load_checkpoint(dir.file("one/checkpoint_last.pt"), torch::kCPU);
  EXPECT_EQ(a.meta.position.step, 6);
  EXPECT_EQ(a.meta.position.batch_index, b.meta.position.batch_index);
  expect_same_weights(a.model, b.model, 1e-6, "2 workers vs 1 worker --update-freq 2");

  // Exact resume with dropout (its randomness is a function of the update and the rank). The
  // straight run validates at its last update, where rank 0 has nothing left to do at the end
  // and the other worker must know it.
  const std::string straight = run("straight", "--max-steps 8 --nproc-per-node 2 --validate-every 4 --valid-src " +
                                                   test::sample_de() + " --valid-tgt " + test::sample_en());
  EXPECT_NE(straight.find("valid | epoch"), std::string::npos) << straight;
  EXPECT_TRUE(fs::exists(dir.file("straight/metrics.csv")));
  run("resumed", "--max-steps 4 --nproc-per-node 2");
  const std::string resumed = run("resumed", "--max-steps 8 --nproc-per-node 2 --resume");
  EXPECT_NE(resumed.find("resumed"), std::string::npos) << resumed;
  auto s = load_checkpoint(dir.file("straight/checkpoint_last.pt"), torch::kCPU);
  auto r = load_checkpoint(dir.file("resumed/checkpoint_last.pt"), torch::kCPU);
  EXPECT_EQ(r.meta.position.step, 8);
  expect_same_weights(s.model, r.model, 0.0, "2 workers straight vs resumed");

  // A 2-worker run continues on one worker: the same global position, one worker's batches.
  run("resumed", "--max-steps 10 --nproc-per-node 1 --resume --update-freq 2");
  auto one = load_checkpoint(dir.file("resumed/checkpoint_last.pt"), torch::kCPU);
  EXPECT_EQ(one.meta.position.step, 10);
}

// The worker with RANK=`rank` among the processes whose command line names `out`.
pid_t find_worker(const std::string& out, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = test::read_text("/proc/" + pid + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(out + " ") == std::string::npos && cmdline.find(out + "\0") == std::string::npos) continue;
    std::string environ = test::read_text("/proc/" + pid + "/environ");
    if (environ.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos ||
        environ.rfind("RANK=" + std::to_string(rank) + '\0', 0) == 0)
      return static_cast<pid_t>(std::stoi(pid));
  }
  return -1;
}

// Starts a long 2-worker job, waits for its first checkpoint, hits rank 1 with `sig`, and
// returns the job's result and how long it took to stop after the signal.
std::pair<test::CommandResult, double> hit_worker(const test::TempDir& dir, const std::string& out, int sig) {
  const std::string command =
      train_command(dir, out, "--max-steps 100000 --validate-every 10 --nproc-per-node 2 --dist-timeout 5");
  auto job = std::async(std::launch::async, [&] { return test::run_command(command); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(dir.file(out + "/checkpoint_last.pt")) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const pid_t worker = find_worker(dir.file(out), 1);
  EXPECT_GT(worker, 0) << "no worker with RANK=1";
  const auto hit = std::chrono::steady_clock::now();
  if (worker > 0) ::kill(worker, sig);
  auto result = job.get();
  return {result, std::chrono::duration<double>(std::chrono::steady_clock::now() - hit).count()};
}

TEST(TrainCommand, AWorkerThatDiesStopsTheJobNamingItAndCheckpointsStayLoadable) {
  if (!distributed_available()) GTEST_SKIP() << "built without Gloo's headers";
  test::TempDir dir;
  auto [result, seconds] = hit_worker(dir, "killed", SIGKILL);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("worker rank 1 (pid"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("was killed by signal 9"), std::string::npos) << result.output;
  EXPECT_LT(seconds, 30.0) << result.output;
  auto last = load_checkpoint(dir.file("killed/checkpoint_last.pt"), torch::kCPU);
  EXPECT_GE(last.meta.position.step, 10);
}

TEST(TrainCommand, AWorkerThatHangsStopsTheJobAfterTheTimeout) {
  if (!distributed_available()) GTEST_SKIP() << "built without Gloo's headers";
  test::TempDir dir;
  auto [result, seconds] = hit_worker(dir, "hung", SIGSTOP);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rank 0: "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("(timeout 5 s)"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("worker rank 0 (pid"), std::string::npos) << result.output;
  EXPECT_GE(seconds, 4.0) << result.output;
  EXPECT_LT(seconds, 30.0) << result.output;
  EXPECT_NO_THROW(load_checkpoint(dir.file("hung/checkpoint_last.pt"), torch::kCPU));
}

TEST(TrainCommand, BadDistributedSettingsAreOneLineErrors) {
  test::TempDir dir;
  auto r = test::run_command(train_command(dir, "bad", "--nproc-per-node 0 --max-steps 1"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--nproc-per-node must be between 1 and 1024"), std::string::npos) << r.output;
  r = test::run_command("WORLD_SIZE=2 RANK=7 " + train_command(dir, "bad", "--max-steps 1"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("RANK=7"), std::string::npos) << r.output;
  // A worker whose peers never come: it gives up after the timeout, naming the address.
  r = test::run_command("WORLD_SIZE=2 RANK=1 MASTER_PORT=" + std::to_string(free_port()) + " " +
                        train_command(dir, "alone", "--max-steps 1 --dist-timeout 2"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1 of 2 could not join the group at 127.0.0.1:"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace torchmt
