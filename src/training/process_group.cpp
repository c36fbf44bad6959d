#include "training/process_group.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>

// LibTorch ships Gloo compiled into libtorch_cpu but not its headers; Debian's libgloo-dev
// provides them (only the class declarations are used: every Gloo object is made by LibTorch).
#if __has_include(<gloo/algorithm.h>) && __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#define TORCHMT_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#else
#define TORCHMT_HAVE_GLOO 0
#endif
// NCCL: CMake defines TORCHMT_WITH_NCCL (and c10d's USE_C10D_NCCL) on this file alone when
// LibTorch is a CUDA build and nccl.h was found (the CUDA wheels' nvidia-nccl package).
#if TORCHMT_HAVE_GLOO && defined(TORCHMT_WITH_NCCL) && defined(USE_C10D_NCCL) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>)
#define TORCHMT_HAVE_NCCL 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define TORCHMT_HAVE_NCCL 0
#endif

#include <torch/torch.h>

#include "util/environment.h"

namespace torchmt {

namespace {

std::string seconds_text(std::chrono::milliseconds t) {
  return std::to_string(t.count() / 1000) + (t.count() % 1000 ? "." + std::to_string(t.count() % 1000 / 100) : "") +
         " s";
}

}  // namespace

DistributedEnv DistributedEnv::from_environment() {
  DistributedEnv env;
  if (!env_value("WORLD_SIZE")) return env;
  env.present = true;
  env.world_size = env_int("WORLD_SIZE", 1, 1, 1 << 20);
  env.rank = env_int("RANK", -1, 0, env.world_size - 1);
  if (env.rank < 0) throw std::invalid_argument("environment variable RANK is missing (WORLD_SIZE is set)");
  env.local_world_size = env_int("LOCAL_WORLD_SIZE", env.world_size, 1, env.world_size);
  env.local_rank = env_int("LOCAL_RANK", env.rank % env.local_world_size, 0, env.local_world_size - 1);
  if (auto addr = env_value("MASTER_ADDR")) env.master_addr = *addr;
  env.master_port = env_int("MASTER_PORT", env.master_port, 1, 65535);
  return env;
}

bool distributed_available() { return TORCHMT_HAVE_GLOO == 1; }
bool nccl_available() { return TORCHMT_HAVE_NCCL == 1; }

#if TORCHMT_HAVE_GLOO

#if TORCHMT_HAVE_NCCL
namespace {
// ProcessGroupNCCL::shutdown() (LibTorch >= 2.4) releases the communicators before the CUDA
// context goes; older versions do it in the destructor.
template <typename T>
auto shutdown_nccl(T& group, int) -> decltype(group.shutdown(), void()) {
  group.shutdown();
}
template <typename T>
void shutdown_nccl(T&, long) {}
}  // namespace
#endif

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#if TORCHMT_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // CUDA tensors, when the device is a GPU
#endif
  // Whether a tensor's collectives run on its device (NCCL for a CUDA tensor when there is
  // one); otherwise Gloo, through a host copy for a CUDA tensor.
  bool reduces_on_device(const at::Tensor& t) const {
#if TORCHMT_HAVE_NCCL
    return nccl && t.is_cuda();
#else
    return false;
#endif
  }
  c10d::Backend& backend_for(const at::Tensor& t) {
#if TORCHMT_HAVE_NCCL
    if (reduces_on_device(t)) return *nccl;
#endif
    return *gloo;
  }
  ~Impl() {
#if TORCHMT_HAVE_NCCL
    if (nccl) {
      try {
        shutdown_nccl(*nccl, 0);
      } catch (const std::exception&) {
        // A peer already gone: nothing left to release in order.
      }
    }
#endif
  }
};

struct ProcessGroup::Pending::Work {
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor tensor, host;  // host: a CPU copy when `tensor` lives on a GPU (Gloo reduces on the host)
  std::string what;
  int rank = 0;
  std::chrono::milliseconds timeout{0};
};

namespace {

// Gloo's first line, without its source location and its advice ("[.../pair.cc:537] Read
// error [127.0.0.1]:43219: Connection reset by peer. This is typically caused by ...").
std::string short_reason(const std::exception& e) {
  std::string reason = e.what();
  if (const auto nl = reason.find('\n'); nl != std::string::npos) reason.resize(nl);
  if (!reason.empty() && reason[0] == '[')
    if (const auto close = reason.find("] "); close != std::string::npos) reason.erase(0, close + 2);
  if (const auto advice = reason.find(" This is typically"); advice != std::string::npos) reason.resize(advice);
  return reason;
}

// A c10d failure (peer gone: "Connection closed by peer"; hung: "Timed out waiting ...") as
// one line naming this rank and the operation.
[[noreturn]] void rethrow(const std::exception& e, int rank, const std::string& what,
                          std::chrono::milliseconds timeout) {
  const std::string reason = short_reason(e);
  throw DistributedError("distributed training: rank " + std::to_string(rank) + ": " + what +
                         " failed: another worker died or stopped answering (timeout " + seconds_text(timeout) +
                         "): " + reason);
}

}  // namespace

ProcessGroup::ProcessGroup(const DistributedEnv& env, std::chrono::milliseconds timeout, c10::Device device)
    : impl_(std::make_unique<Impl>()), rank_(env.rank), size_(env.world_size), timeout_(timeout) {
  // A write to a peer that died must be an error (named below), not SIGPIPE's silent death:
  // c10d's store and Gloo write to sockets without MSG_NOSIGNAL, and Python, where they are
  // usually run, ignores SIGPIPE at start-up. Seen: rank 1 killed -> rank 0 "killed by signal
  // 13" in the same instant, and the launcher named rank 0 instead of rank 1.
  std::signal(SIGPIPE, SIG_IGN);
  // The backend asked for, checked before this rank joins (a bad value must not leave the
  // others waiting for it).
  const std::string backend = env_value("TORCHMT_DIST_BACKEND").value_or("");
  if (backend == "nccl" && !device.is_cuda())
    throw std::invalid_argument("TORCHMT_DIST_BACKEND=nccl reduces CUDA tensors: it needs --device cuda");
  if (backend == "nccl" && !nccl_available())
    throw std::invalid_argument(
        "TORCHMT_DIST_BACKEND=nccl: this build has no NCCL (it needs a CUDA LibTorch and nccl.h when it is built)");
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0;
    store_options.numWorkers = static_cast<size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    // On loopback every rank binds 127.0.0.1; across machines GLOO_SOCKET_IFNAME names the
    // interface (as in PyTorch), else the address this host's name resolves to.
    if (auto ifname = env_value("GLOO_SOCKET_IFNAME"))
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*ifname));
    else if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost")
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env.rank, env.world_size, options);
#if TORCHMT_HAVE_NCCL
    if (device.is_cuda() && backend != "gloo") {
      // Its own key space in the store (the NCCL unique id), beside Gloo's.
      auto nccl_store = c10::make_intrusive<c10d::PrefixStore>("nccl", impl_->store);
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = timeout;
      impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(nccl_store, env.rank, env.world_size, nccl_options);
      backend_ = "NCCL + Gloo";
    }
#endif
  } catch (const std::exception& e) {
    const std::string reason = short_reason(e);
    throw DistributedError("distributed training: rank " + std::to_string(env.rank) + " of " +
                           std::to_string(env.world_size) + " could not join the group at " + env.master_addr + ":" +
                           std::to_string(env.master_port) + " within " + seconds_text(timeout) + ": " + reason);
  }
}

ProcessGroup::~ProcessGroup() = default;

ProcessGroup::Pending ProcessGroup::all_reduce_sum_async(at::Tensor tensor, const char* what) {
  Pending pending;
  pending.work_ = std::make_unique<Pending::Work>();
  auto& w = *pending.work_;
  w.tensor = tensor;
  w.what = what;
  w.rank = rank_;
  w.timeout = timeout_;
  w.host = tensor.is_cpu() || impl_->reduces_on_device(tensor) ? tensor : tensor.to(torch::kCPU);
  try {
    std::vector<at::Tensor> list{w.host};
    w.work = impl_->backend_for(w.host).allreduce(list);
  } catch (const std::exception& e) {
    rethrow(e, rank_, w.what, timeout_);
  }
  return pending;
}

void ProcessGroup::Pending::wait() {
  if (!work_) return;
  auto w = std::move(work_);
  try {
    w->work->wait();
  } catch (const std::exception& e) {
    rethrow(e, w->rank, w->what, w->timeout);
  }
  if (!w->tensor.is_same(w->host)) w->tensor.copy_(w->host);
}

void ProcessGroup::broadcast(std::vector<at::Tensor> tensors, int root) {
  for (auto& t : tensors) {
    at::Tensor host = t.is_cpu() || impl_->reduces_on_device(t) ? t.contiguous() : t.to(torch::kCPU).contiguous();
    try {
      std::vector<at::Tensor> list{host};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      impl_->backend_for(host).broadcast(list, options)->wait();
    } catch (const std::exception& e) {
      rethrow(e, rank_, "broadcast from rank " + std::to_string(root), timeout_);
    }
    if (!host.is_same(t)) t.copy_(host);
  }
}

void ProcessGroup::barrier(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) timeout = timeout_;
  try {
    c10d::BarrierOptions options;
    options.timeout = timeout;
    impl_->gloo->barrier(options)->wait();
  } catch (const std::exception& e) {
    rethrow(e, rank_, "barrier", timeout);
  }
}

void ProcessGroup::broadcast_bytes(std::string& bytes, int root) {
  auto length = torch::full({1}, static_cast<int64_t>(bytes.size()), torch::kLong);
  broadcast({length}, root);
  auto data = torch::empty({length.item<int64_t>()}, torch::kUInt8);  // [bytes]
  if (rank_ == root) std::memcpy(data.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  broadcast({data}, root);
  bytes.assign(reinterpret_cast<const char*>(data.data_ptr<uint8_t>()), static_cast<size_t>(data.numel()));
}

bool ProcessGroup::all_true(bool value) {
  auto t = torch::full({1}, value ? 0.0f : 1.0f);  // counts the ranks that say no
  all_reduce_sum(t, "agreement on whether to go on");
  return t.item<float>() == 0.0f;
}

#else  // no Gloo headers at build time

struct ProcessGroup::Impl {};
struct ProcessGroup::Pending::Work {};

ProcessGroup::ProcessGroup(const DistributedEnv& env, std::chrono::milliseconds timeout, c10::Device)
    : rank_(env.rank), size_(env.world_size), timeout_(timeout) {
  throw DistributedError(
      "distributed training is not in this build: Gloo's headers were missing when it was compiled "
      "(Debian: apt-get install libgloo-dev, then rebuild)");
}
ProcessGroup::~ProcessGroup() = default;
ProcessGroup::Pending ProcessGroup::all_reduce_sum_async(at::Tensor, const char*) { return {}; }
void ProcessGroup::Pending::wait() {}
void ProcessGroup::broadcast(std::vector<at::Tensor>, int) {}
void ProcessGroup::broadcast_bytes(std::string&, int) {}
void ProcessGroup::barrier(std::chrono::milliseconds) {}
bool ProcessGroup::all_true(bool value) { return value; }

#endif

ProcessGroup::Pending::Pending() = default;
ProcessGroup::Pending::Pending(Pending&&) noexcept = default;
ProcessGroup::Pending& ProcessGroup::Pending::operator=(Pending&&) noexcept = default;
ProcessGroup::Pending::~Pending() = default;

}  // namespace torchmt
