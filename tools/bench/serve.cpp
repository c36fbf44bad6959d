// bench_serve: a load test of `torchmt serve` on loopback, against `torchmt translate` on the
// same sentences in one process as the ceiling.
//   Starts the server (the torchmt binary beside this one, or --torchmt), then for each client
//   count (--clients 1,8,64) sends the sentences one per request (POST /translate, keep-alive
//   connections, each client sends its next request when the last is answered) and measures
//   requests/s, p50 / p99 latency, and the mean batch the server formed (from /metrics). Then
//   `torchmt translate` on the same sentences: sentences/s (its own decoding time). Prints the
//   table and the ratios: server sentences/s / translate's (goal at 64 clients: >= 0.70) and
//   p99 / p50 (goal <= 4).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include <csignal>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cxxopts.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "data/text_file.h"
#include "util/atomic_file.h"
#include "torchmt/util/device.h"
#include "kernels/cpu_isa.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("cannot start " + args[0]);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

double metric(const std::string& text, const std::string& name) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\n" + name + " ([0-9.e+-]+)\n"))) return std::stod(m[1]);
  return 0;
}

struct Level {
  int clients = 0;
  double seconds = 0, p50 = 0, p99 = 0, mean_batch = 0, mean_step_rows = 0;
  size_t requests = 0, failed = 0;
};

Level run_level(int port, const std::vector<std::string>& sentences, int clients) {
  httplib::Client probe("127.0.0.1", port);
  const auto before = probe.Get("/metrics");
  std::atomic<size_t> next{0}, failed{0};
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      // Headers and body go out in two writes: with Nagle's algorithm the body waited for the
      // server's delayed ACK (40 ms per request, measured: p50 52 ms at 1 client, int8).
      client.set_tcp_nodelay(true);
      client.set_read_timeout(600, 0);
      for (size_t i; (i = next++) < sentences.size();) {
        const auto t0 = Clock::now();
        auto res = client.Post("/translate", nlohmann::json{{"q", sentences[i]}}.dump(), "application/json");
        latencies[static_cast<size_t>(c)].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        if (!res || res->status != 200) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  Level level;
  level.clients = clients;
  level.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  level.requests = all.size();
  level.failed = failed;
  level.p50 = all[all.size() / 2];
  level.p99 = all[std::min(all.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(all.size())))];
  const auto after = probe.Get("/metrics");
  if (before && after) {
    const double batches =
        metric(after->body, "torchmt_batch_sentences_count") - metric(before->body, "torchmt_batch_sentences_count");
    const double sum =
        metric(after->body, "torchmt_batch_sentences_sum") - metric(before->body, "torchmt_batch_sentences_sum");
    level.mean_batch = batches > 0 ? sum / batches : 0;
    const double steps = metric(after->body, "torchmt_step_rows_count") - metric(before->body, "torchmt_step_rows_count");
    const double rows = metric(after->body, "torchmt_step_rows_sum") - metric(before->body, "torchmt_step_rows_sum");
    level.mean_step_rows = steps > 0 ? rows / steps : 0;
  }
  return level;
}

}  // namespace

static int run(int argc, char** argv) {
  cxxopts::Options options("bench_serve", "Load test of torchmt serve on loopback vs torchmt translate");
  options.add_options()("m,model", "checkpoint or export", cxxopts::value<std::string>())(
      "src", "sentences (plain or .gz)",
      cxxopts::value<std::string>()->default_value("data/multi30k/test_2016_flickr.de.gz"))(
      "sentences", "how many of them (0 = all)", cxxopts::value<int>()->default_value("1000"))(
      "clients", "concurrent clients, comma-separated", cxxopts::value<std::string>()->default_value("1,8,64"))(
      "torchmt", "the torchmt binary (default: beside this one)", cxxopts::value<std::string>()->default_value(""))(
      "flags", "extra flags for both serve and translate (e.g. \"--dtype int8 --beam 5\")",
      cxxopts::value<std::string>()->default_value(""))(
      "serve-flags", "extra flags for serve only (e.g. \"--max-wait-ms 10\")",
      cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  cxxopts::ParseResult args;
  try {
    args = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_serve: " << e.what() << "\n";
    return 2;
  }
  if (args.count("help") || !args.count("model")) {
    std::cout << options.help() << "\n";
    return args.count("help") ? 0 : 2;
  }
  std::string torchmt = args["torchmt"].as<std::string>();
  if (torchmt.empty()) torchmt = (std::filesystem::path(argv[0]).parent_path() / "torchmt").string();
  const std::string model = args["model"].as<std::string>();
  auto sentences = torchmt::read_lines(args["src"].as<std::string>());
  if (args["sentences"].as<int>() > 0 && sentences.size() > static_cast<size_t>(args["sentences"].as<int>()))
    sentences.resize(static_cast<size_t>(args["sentences"].as<int>()));
  if (sentences.empty()) throw std::runtime_error("'" + args["src"].as<std::string>() + "' has no lines");
  std::vector<std::string> extra, serve_extra;
  {
    std::stringstream in(args["flags"].as<std::string>());
    for (std::string w; in >> w;) extra.push_back(w);
    std::stringstream s(args["serve-flags"].as<std::string>());
    for (std::string w; s >> w;) serve_extra.push_back(w);
  }
  const auto dir = std::filesystem::temp_directory_path() / ("bench_serve_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);

  // The ceiling: the same sentences through `torchmt translate` in one process.
  const std::string input = (dir / "in.txt").string(), output = (dir / "out.txt").string();
  {
    std::ofstream out(input);
    for (const auto& s : sentences) out << s << "\n";
  }
  std::vector<std::string> translate_args{torchmt, "translate", "-m", model, "-i", input, "-o", output};
  translate_args.insert(translate_args.end(), extra.begin(), extra.end());
  const std::string translate_log = (dir / "translate.log").string();
  pid_t pid = spawn(translate_args, translate_log);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream tl(translate_log);
  const std::string tlog((std::istreambuf_iterator<char>(tl)), std::istreambuf_iterator<char>());
  std::smatch m;
  if (!std::regex_search(tlog, m, std::regex("translated ([0-9]+) lines in ([0-9.e+-]+) s"))) {
    std::cerr << "bench_serve: translate failed:\n" << tlog;
    return 1;
  }
  const double ceiling = std::stod(m[1]) / std::stod(m[2]);

  std::vector<std::string> serve_args{torchmt, "serve", "-m", model, "--port", "0", "--max-sentences", "1024"};
  serve_args.insert(serve_args.end(), extra.begin(), extra.end());
  serve_args.insert(serve_args.end(), serve_extra.begin(), serve_extra.end());
  const std::string serve_log = (dir / "serve.log").string();
  pid = spawn(serve_args, serve_log);
  int port = 0;  // the server picks a free one and says which
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream in(serve_log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (std::regex_search(text, m, std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)/"))) port = std::stoi(m[1]);
    else std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (port == 0) {
    kill(pid, SIGKILL);
    std::cerr << "bench_serve: the server did not start (log: " << serve_log << ")\n";
    return 1;
  }
  run_level(port, std::vector<std::string>(sentences.begin(), sentences.begin() + std::min<size_t>(16, sentences.size())),
            4);  // warm-up: first allocations, thread pools

  std::cout << "bench_serve: " << sentences.size() << " sentences, one per request; flags: "
            << args["flags"].as<std::string>() << " | serve: " << args["serve-flags"].as<std::string>() << "\n";
  // mean batch: sentences per whole batch; rows/step: sentences per decoding step of in-flight
  // batching (serve --continuous, the default for greedy requests on models that can join rows).
  std::cout << "clients  requests/s  p50 ms  p99 ms  p99/p50  mean batch  rows/step  failed  vs translate\n";
  for (const auto& c : split_list(args["clients"].as<std::string>())) {
    const Level l = run_level(port, sentences, std::stoi(c));
    const double rps = static_cast<double>(l.requests) / l.seconds;
    std::cout << std::setw(7) << l.clients << std::fixed << std::setprecision(1) << std::setw(12) << rps
              << std::setw(8) << l.p50 * 1e3 << std::setw(8) << l.p99 * 1e3 << std::setprecision(2) << std::setw(9)
              << l.p99 / l.p50 << std::setprecision(1) << std::setw(12) << l.mean_batch << std::setw(11) << l.mean_step_rows
              << std::setw(8) << l.failed
              << std::setprecision(2) << std::setw(13) << rps / ceiling << "x\n";
  }
  std::cout << "ceiling: torchmt translate, same sentences, one process: " << std::fixed << std::setprecision(1)
            << ceiling << " sentences/s\n";
  kill(pid, SIGTERM);
  waitpid(pid, &status, 0);
  torchmt::remove_tree(dir.string());
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

// Bad input (a missing file, a wrong flag, a corrupt checkpoint) ends in one line naming it, not in
// std::terminate.
int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  torchmt::use_shape_free_cuda_attention();
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_serve: " << e.what() << "\n";
    return 1;
  }
}
