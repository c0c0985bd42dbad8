#pragma once
// Ranks as threads of one process (DataParallel's use: one command, one process, several devices),
// running exactly the data-parallel algorithm of a process per rank. Note [Ranks as threads].

#include "ddp/common/run_main.h"
#include "ddp/common/worker_identity.h"
#include "ddp/loop/train_config.h"

namespace ddp {

/// The identity of rank thread `thread` of `threads` in process `process` (one process per node,
/// ranks numbered node by node): rank process.rank · threads + thread of process.world_size · threads.
WorkerIdentity rank_thread_identity(const WorkerIdentity& process, int threads, int thread);

/// Intra-op threads for each of `ranks` rank threads: OMP_NUM_THREADS (`omp_num_threads`, null when
/// unset), else this process's cores, split evenly, at least one.
int intra_op_threads_per_rank(const char* omp_num_threads, int cores, int ranks);

/// Trains `config` with rank_threads(config.dist) ranks as threads of this process, a Trainer
/// each, and returns the exit status (128 + the signal that stopped them). A rank that fails ends
/// the process: its message, as `errors` words it with "rank N: " after the program's name, is
/// the one printed, and the status is its.
int run_rank_threads(const TrainConfig& config, const WorkerIdentity& process, const ProgramErrors& errors);

}  // namespace ddp
