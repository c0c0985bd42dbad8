#pragma once
// Who this worker is: from ddprun's environment, or from flags when started by hand.

#include <string>

#include "ddp/common/worker_contract.h"

namespace ddp {

/// A worker's place in the job.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  ///< 0 when unknown (started by hand)
  int node_rank = -1;        ///< GROUP_RANK (ddprun), SLURM_NODEID (Slurm tasks); -1 when unknown
  std::string master_addr = kDefaultMasterAddr;
  int master_port = kDefaultMasterPort;
  int restart_count = 0;
  /// The launcher hosts the store (TORCHELASTIC_USE_AGENT_STORE); otherwise rank 0 hosts it.
  bool launcher_store = false;
  std::string run_id;
  /// Set by ddprun for single-node runs: meet through a FileStore in this private directory.
  std::string store_path;
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and ddprun's variables.
/// Missing variables mean a single process. Without RANK, inside a Slurm task (SLURM_PROCID), the
/// same from Slurm's: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the tasks of this node, the first
/// host of the step's node list, the job's port (slurm_master_port). Throws UserError naming a
/// malformed variable.
DistEnv dist_env_from_environment();

/// Checks ranges (rank < world_size, ...); throws UserError.
void validate(const DistEnv& env);

}  // namespace ddp
