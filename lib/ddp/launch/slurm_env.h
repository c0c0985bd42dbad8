#pragma once
// Mode A of Slurm (one ddprun per node, `srun --ntasks-per-node=1 ddprun ...`): the node count, this
// node's rank, the master address and port, and the run id, read from the job step's environment,
// so that a job script needs no arithmetic of its own.

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace ddp {

/// What a Slurm job step says about this node.
struct SlurmLayout {
  int nnodes = 1;            ///< SLURM_STEP_NUM_NODES, else SLURM_NNODES
  int node_rank = 0;         ///< SLURM_NODEID
  std::string master_addr;   ///< the first host of SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST
  int master_port = 0;       ///< slurm_master_port(SLURM_JOB_ID)
  std::string run_id;        ///< "slurm-JOB.STEP"
  /// Option → "VALUE (VARIABLE)": which variables gave what, for the one line ddprun prints.
  std::map<std::string, std::string> sources;
};

/// The layout from `lookup` (getenv, or a test's map); nullopt outside a Slurm job step (no
/// SLURM_JOB_ID or SLURM_NODEID). Throws UserError naming the variable that is malformed.
std::optional<SlurmLayout> slurm_layout(const std::function<const char*(const char*)>& lookup);

}  // namespace ddp
