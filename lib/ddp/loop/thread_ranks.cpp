#include "ddp/loop/thread_ranks.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "ddp/common/available_cores.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"
#include "ddp/loop/rank_log.h"
#include "ddp/loop/trainer.h"
#include "ddp/model/rank_random.h"

namespace ddp {

// Note [Ranks as threads]
// `ddp-train --threads N` (dist.threads; `--devices` on CUDA) runs N ranks as threads of one
// process. Each thread is a whole rank as a process would be: its own Trainer, replica, sampler
// share, optimizer and Gloo (or NCCL) group, over the same plan, reducer, shared-memory sums,
// checkpoints and outputs, so the run computes exactly what N processes compute (bit-identical
// model.pt). What a process would own alone is made per thread:
// - the store: an in-process HashStore (a process per node under ddprun meets through its store);
// - random draws: LibTorch's default CPU generator is the process's, so each rank draws from its
//   own (rank_random.h), seeded as a process would seed the default one; models are built one
//   rank at a time, since nn::init draws from the default generator;
// - intra-op threads: the cores (or OMP_NUM_THREADS) split among the ranks, as ddprun splits them
//   among processes;
// - the console: rank 0 speaks, the others only warn, naming themselves (rank_log.h).
// Shared, as the processes of a node share them: the dataset caches (mapped once per node, so
// once here), the page cache, the stop signal (SIGINT reaches the process; the ranks vote as
// ever). A rank that throws cannot be left while the others wait for it in a collective: the
// first failure prints its line and ends the process (as ddprun stops a failed worker's group).
// A TorchScript model's own dropout draws from the default generator whatever thread runs it: its
// forward takes the generator one rank at a time, with the rank's state in it (drawing_as_rank).

WorkerIdentity rank_thread_identity(const WorkerIdentity& process, int threads, int thread) {
  WorkerIdentity rank = process;
  rank.rank = process.rank * threads + thread;
  rank.world_size = process.world_size * threads;
  rank.local_rank = thread;
  rank.local_world_size = threads;
  rank.node_rank = process.world_size == 1 ? 0 : process.node_rank >= 0 ? process.node_rank : process.rank;
  rank.node_count = process.world_size;
  return rank;
}

int intra_op_threads_per_rank(const char* omp_num_threads, int cores, int ranks) {
  int budget = cores;
  if (omp_num_threads && *omp_num_threads) {
    auto parsed = parse_int(omp_num_threads);
    if (!parsed || *parsed < 1)
      throw UserError(std::string("OMP_NUM_THREADS: expected a positive count, got '") + omp_num_threads + "'");
    budget = static_cast<int>(std::min<int64_t>(*parsed, 1 << 20));
  }
  return std::max(1, budget / ranks);
}

int run_rank_threads(const TrainConfig& config, const WorkerIdentity& process, const ProgramErrors& errors) {
  const int threads = rank_threads(config.dist);
  if (process.local_world_size > 1)
    throw UserError("dist.threads: this node runs " + std::to_string(process.local_world_size) +
                    " processes; rank threads need one process per node (ddprun --nproc-per-node 1), each "
                    "running " + std::to_string(threads) + " ranks");
#ifndef DDP_WITH_CUDA
  // Once, before any rank thread says it drives a device (each would refuse it on its own).
  if (!config.dist.devices.empty())
    throw ConfigError("dist.devices: CUDA devices need a CUDA build (cmake -DDDP_WITH_CUDA=ON against a CUDA "
                      "LibTorch); ranks as threads on the CPU are dist.threads (ddp-train --threads N)");
#endif
  const int intra_op = intra_op_threads_per_rank(std::getenv("OMP_NUM_THREADS"), available_cores(), threads);
  // Ranks of other processes meet through the TCP store (or ddprun's); these alone, in memory.
  c10::intrusive_ptr<c10d::Store> store;
  if (process.world_size == 1) {
    store = c10::make_intrusive<c10d::HashStore>();
    store->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(config.dist.timeout_s * 1000)));
  }
  log_by_rank_thread();
  spdlog::info("{} ranks as threads of this process{}, {} intra-op thread{} each", threads,
               config.dist.devices.empty() ? "" : " (one a CUDA device)", intra_op, intra_op == 1 ? "" : "s");

  static std::mutex report_once;  // locked by the first failure, never released: the process ends
  std::vector<int> statuses(static_cast<std::size_t>(threads), kExitSuccess);
  std::vector<std::thread> ranks;
  auto run_rank = [&](int t) {
    const WorkerIdentity identity = rank_thread_identity(process, threads, t);
    set_log_rank(identity.rank);
    at::set_num_threads(intra_op);
    RankGeneratorScope generator;
    ProgramErrors mine = errors;
    mine.prefix = [rank = identity.rank] { return "rank " + std::to_string(rank) + ": "; };
    mine.exit_at_once = [] { return true; };
    mine.claim = [] { report_once.lock(); };
    // Outside the body, as in ddp-train's main: a failure's line comes, and the process ends,
    // before the trainer's teardown, which would free the other ranks to fail in words of their own.
    std::unique_ptr<Trainer> trainer;
    statuses[static_cast<std::size_t>(t)] = run_main(mine, [&] {
      trainer = std::make_unique<Trainer>(config, identity, store);
      const int stopped_by = trainer->fit();
      return stopped_by ? 128 + stopped_by : kExitSuccess;
    });
  };
  for (int t = 0; t < threads; ++t) {
    try {
      ranks.emplace_back(run_rank, t);
    } catch (const std::system_error& e) {  // the others are running: they cannot be left
      report_once.lock();
      std::fprintf(stderr, "%s: cannot start rank thread %d of %d: %s\n", errors.program, t, threads, e.what());
      std::fflush(stderr);
      std::_Exit(kExitFailure);
    }
  }
  for (auto& rank : ranks) rank.join();
  return *std::max_element(statuses.begin(), statuses.end());
}

}  // namespace ddp
