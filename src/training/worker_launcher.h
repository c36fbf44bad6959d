#pragma once
// `torchmt train --nproc-per-node N`: starts N copies of this executable with the same
// arguments and torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), as `torchrun --no-python torchmt train ...` would. With NNODES
// and NODE_RANK in the environment (and MASTER_ADDR/MASTER_PORT of node 0) the same command
// on every machine makes one job of NNODES x N workers. SIGINT/SIGTERM are passed on (the
// workers agree on a step, save and exit); when a worker fails, the launcher names it, stops
// the others and exits non-zero.
#include <string>
#include <vector>

namespace torchmt {

// Returns the exit status for the command: 0 when every worker exited 0.
int launch_local_workers(int nproc, const std::vector<std::string>& args);

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick), for rank 0's store.
int free_loopback_port();

}  // namespace torchmt
