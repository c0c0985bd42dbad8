#pragma once
// Who a worker is, as one struct that both programs share: ddprun writes it into each worker's
// environment (worker_variables), ddp-train reads it back (worker_identity_from). A worker that
// Slurm starts as a task of its own (mode B, `srun ddp-train`) reads it from Slurm's variables;
// ddprun under Slurm (mode A, one launcher per node) reads its node's layout from them
// (slurm_layout). Every name comes from worker_contract.h. No LibTorch: the launcher uses it.

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "ddp/common/worker_contract.h"

namespace ddp {

/// One environment variable's value, or nullptr when unset: std::getenv, or a test's map.
using EnvironmentLookup = std::function<const char*(const char*)>;

/// This process's environment as an EnvironmentLookup.
const char* process_variable(const char* name);

/// A worker's place in the job and where it meets the others.
struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 0;  ///< 0 when unknown (started by hand): placement then cannot count GPUs per node
  int node_rank = -1;        ///< GROUP_RANK; -1 when unknown (started by hand)
  int node_count = 1;        ///< GROUP_WORLD_SIZE
  std::string master_addr = kDefaultMasterAddr;
  int master_port = kDefaultMasterPort;
  std::string run_id;
  int restart_count = 0;
  int max_restarts = 0;
  int round = 0;  ///< DDPRUN_ROUND: restart_count, unless an elastic job changed its members
  /// SLURM_RESTART_COUNT, in either Slurm mode (ddprun's workers inherit it): how often Slurm
  /// requeued the job, each requeue a later attempt of it, as a restart is.
  int requeues = 0;
  /// Set by ddprun for single-node runs: meet through a FileStore in this private directory.
  std::string store_path;
  /// The launcher hosts the store (TORCHELASTIC_USE_AGENT_STORE); otherwise rank 0 hosts it.
  bool launcher_store = false;
  /// Note [Slurm's batch step]: why this identity, read from a Slurm job outside any job step, is
  /// no rank of a run (""): the program refuses to start with it unless its command line gives the world.
  std::string outside_slurm_step;

  bool operator==(const WorkerIdentity&) const = default;
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT and ddprun's variables; missing ones mean a single process. Without RANK, inside a
/// Slurm task, the same from Slurm's (mode B: task id, task count, local id, node id, the tasks of
/// this node, the first host of the step's node list, the job's port), with MASTER_ADDR and
/// MASTER_PORT still winning. Throws UserError naming a malformed variable.
WorkerIdentity worker_identity_from(const EnvironmentLookup& lookup);

/// worker_identity_from this process's environment.
WorkerIdentity worker_identity_from_environment();

/// The variables the launcher sets for a worker, by name: worker_identity_from reads them back as
/// `identity`.
std::map<std::string, std::string> worker_variables(const WorkerIdentity& identity);

/// Checks ranges (rank < world_size, ...); throws UserError.
void validate(const WorkerIdentity& identity);

/// The run id of a Slurm job step, "slurm-JOB.STEP" ("slurm-JOB" without a step), with the step
/// made printable: it names a directory under --log-dir.
std::string slurm_run_id(long long job_id, const char* step_id);

/// What a Slurm job step says about this node, for ddprun in mode A (one launcher per node), so
/// that a job script needs no arithmetic of its own.
struct SlurmLayout {
  int nnodes = 1;           ///< the step's node count, else the job's
  int node_rank = 0;        ///< this node's index in the step
  std::string master_addr;  ///< the first host of the step's node list, else the job's
  int master_port = 0;      ///< slurm_master_port(job id)
  std::string run_id;       ///< slurm_run_id
  /// Option → "VALUE (VARIABLE)": which variables gave what, for the one line ddprun prints.
  std::map<std::string, std::string> sources;
  /// Why --nnodes from here would be wrong: a batch script of several nodes (Note [Slurm's batch
  /// step]); "" when it is right. ddprun refuses to take it.
  std::string nnodes_refusal;
  /// Why --node-rank from here would be wrong: a step of several tasks on this node, each a ddprun
  /// taking the node's rank; "" when it is right. ddprun refuses to take it.
  std::string node_rank_refusal;
};

/// The layout from `lookup`; nullopt outside a Slurm job step (no job id or node id). Throws
/// UserError naming the variable that is malformed.
std::optional<SlurmLayout> slurm_layout(const EnvironmentLookup& lookup);

}  // namespace ddp
