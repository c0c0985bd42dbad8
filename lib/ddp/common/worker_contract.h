#pragma once
// The contract between the launcher and every worker it starts: the environment variables it sets,
// the heartbeat it reads, the exit statuses both sides give meaning to. ddprun writes these and
// ddp-train reads them; neither side spells a name of its own. Slurm's names live here too, so that
// every variable a worker's identity comes from is spelled in this one file (worker_identity.h).

#include <cstdint>

namespace ddp {

/// Exit statuses shared by both binaries (ninja's exit_status.h idea). A worker killed by signal N,
/// or stopped by it after a checkpoint, exits 128+N, as shells report it.
enum ExitStatus : int {
  kExitSuccess = 0,
  kExitFailure = 1,
  kExitUsage = 2,  ///< bad command line, config or input: nothing was run, and a restart would repeat it
  kExitIoError = 74,  ///< an output could not be written (disk full, I/O error): restartable (sysexits' EX_IOERR)
};

/// Why the launcher stops its workers. A cause other than kAsked is sent first as the value of a
/// sigqueue()d stop signal to each worker (then the signal to its process group, as to any program),
/// so that a worker that reads it says why it stops rather than "as asked".
enum class StopReason : int {
  kAsked = 0,              ///< the launcher was asked (SIGTERM, SIGINT, SIGHUP), or someone signalled the worker
  kMembershipChanged = 1,  ///< elastic: nodes joined or left, and the round ends
  kPeerFailed = 2,         ///< another rank failed or stalled
  kPeerInterrupted = 3,    ///< another node was interrupted (Ctrl-C there)
};

/// torchrun's default rendezvous address and port, for MASTER_ADDR and MASTER_PORT.
inline constexpr const char* kDefaultMasterAddr = "127.0.0.1";
inline constexpr int kDefaultMasterPort = 29500;

/// The worker's heartbeat: after each step it writes the step number, one native int64 (8 bytes)
/// per beat, to the pipe named by DDPRUN_HEARTBEAT_FD. A worker that never writes is not watched.
/// A pipeline stage also beats after each microbatch's forward or backward, and says where it is in
/// the bits above the step's (HeartbeatBeat): a plain step number says nothing there.
using HeartbeatRecord = int64_t;

/// One beat, decoded: bits 0-39 the step, 40-51 the pipeline stage + 1, 52-62 the microbatch + 1.
struct HeartbeatBeat {
  int64_t step = 0;
  int stage = -1;       ///< the worker's pipeline stage, or -1
  int microbatch = -1;  ///< the microbatch whose forward or backward it last finished, or -1

  HeartbeatRecord encode() const {
    return (step & kStepMask) | (static_cast<int64_t>(stage + 1) & 0xfff) << 40 |
           (static_cast<int64_t>(microbatch + 1) & 0x7ff) << 52;
  }
  static HeartbeatBeat decode(HeartbeatRecord record) {
    return {record & kStepMask, static_cast<int>(record >> 40 & 0xfff) - 1, static_cast<int>(record >> 52 & 0x7ff) - 1};
  }
  static constexpr int64_t kStepMask = (int64_t{1} << 40) - 1;
};

/// Who reads a variable the launcher sets.
enum class VariableReader {
  kTrainer,      ///< ddp-train reads it
  kTorchPython,  ///< for torch.distributed programs under `ddprun -- PROGRAM`; ddp-train ignores it
};

/// One variable of the contract.
struct WorkerVariable {
  const char* name;
  VariableReader reader;
};

/// The names, each spelled once.
namespace env {
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kRoleName = "ROLE_NAME";  ///< torchrun's --role
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRunId = "DDPRUN_RUN_ID";
inline constexpr const char* kRestartCount = "DDPRUN_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "DDPRUN_MAX_RESTARTS";
/// The launch's rendezvous round: the restart count, and in an elastic job one more at each
/// membership change too, which leaves the restart count alone (as torchrun's).
inline constexpr const char* kRound = "DDPRUN_ROUND";
inline constexpr const char* kStorePath = "DDPRUN_STORE_PATH";  ///< single node: a FileStore directory
inline constexpr const char* kHeartbeatFd = "DDPRUN_HEARTBEAT_FD";
/// "1" when the launcher's console is a terminal: the worker may then write progress lines to its
/// stdout, each starting with kProgressMarker, which the launcher redraws in place (never in logs).
inline constexpr const char* kProgress = "DDPRUN_PROGRESS";
/// Read by the launcher, never passed on to a worker: the job's secret for the store's control values.
inline constexpr const char* kRdzvSecret = "DDPRUN_RDZV_SECRET";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
/// Read by the launcher: the Python that runs a script (`ddprun train.py`); default python3 on PATH.
inline constexpr const char* kPython = "DDPRUN_PYTHON";
// torch elastic's own names, so torch.distributed's env:// joins the launcher's store.
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr const char* kElasticRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kElasticMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kElasticRunId = "TORCHELASTIC_RUN_ID";
/// Where torch.distributed.elastic's @record writes a failed rank's exception (JSON), which the
/// launcher's summary then names; set under --log-dir.
inline constexpr const char* kElasticErrorFile = "TORCHELASTIC_ERROR_FILE";
/// What torchrun's agent sets unless set: a hung NCCL collective aborts at the process group's
/// time-out, where it would hang. torch 2.2 and later read the first name (and warn of the second);
/// earlier ones only the second.
inline constexpr const char* kNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr const char* kNcclAsyncErrorHandlingBefore22 = "NCCL_ASYNC_ERROR_HANDLING";
}  // namespace env

/// Slurm's names, which neither program sets: ddprun reads a job step's layout from them (mode A,
/// one launcher per node), ddp-train its identity when each Slurm task is a rank (mode B). Spelled
/// here only, next to the launcher's.
namespace slurm {
inline constexpr const char* kJobId = "SLURM_JOB_ID";
inline constexpr const char* kStepId = "SLURM_STEP_ID";
inline constexpr const char* kNodeId = "SLURM_NODEID";  ///< this node's index in the step
inline constexpr const char* kProcId = "SLURM_PROCID";  ///< this task's rank
inline constexpr const char* kLocalId = "SLURM_LOCALID";
inline constexpr const char* kStepNumTasks = "SLURM_STEP_NUM_TASKS";  ///< the step's; the job's (below) otherwise
inline constexpr const char* kNtasks = "SLURM_NTASKS";
inline constexpr const char* kNprocs = "SLURM_NPROCS";  ///< older Slurm's spelling of kNtasks
inline constexpr const char* kStepNumNodes = "SLURM_STEP_NUM_NODES";
inline constexpr const char* kNnodes = "SLURM_NNODES";  ///< the job's; the step's (above) wins
inline constexpr const char* kStepNodeList = "SLURM_STEP_NODELIST";
inline constexpr const char* kJobNodeList = "SLURM_JOB_NODELIST";
inline constexpr const char* kStepTasksPerNode = "SLURM_STEP_TASKS_PER_NODE";
inline constexpr const char* kTasksPerNode = "SLURM_TASKS_PER_NODE";
inline constexpr const char* kRestartCount = "SLURM_RESTART_COUNT";  ///< how often the job was requeued
inline constexpr const char* kCpusPerTask = "SLURM_CPUS_PER_TASK";   ///< set with --cpus-per-task
inline constexpr const char* kCpusOnNode = "SLURM_CPUS_ON_NODE";     ///< the job's CPUs on this node
}  // namespace slurm

/// What starts a progress line (see env::kProgress): a carriage return, then a tag no ordinary
/// output starts with (tqdm's own "\r 10%|..." is output like any other).
inline constexpr const char* kProgressMarker = "\r\x1b[ddprun-progress]";

/// Every variable the launcher may set, and who reads it (a test holds both sides to this list).
inline constexpr WorkerVariable kWorkerVariables[] = {
    {env::kRank, VariableReader::kTrainer},
    {env::kLocalRank, VariableReader::kTrainer},
    {env::kWorldSize, VariableReader::kTrainer},
    {env::kLocalWorldSize, VariableReader::kTrainer},
    {env::kGroupRank, VariableReader::kTrainer},       // the node, for the hierarchical all-reduce
    {env::kGroupWorldSize, VariableReader::kTrainer},  // read into WorkerIdentity::node_count
    {env::kRoleName, VariableReader::kTorchPython},    // --role
    {env::kRoleRank, VariableReader::kTorchPython},
    {env::kRoleWorldSize, VariableReader::kTorchPython},
    {env::kMasterAddr, VariableReader::kTrainer},
    {env::kMasterPort, VariableReader::kTrainer},
    {env::kRunId, VariableReader::kTrainer},
    {env::kRestartCount, VariableReader::kTrainer},
    {env::kMaxRestarts, VariableReader::kTrainer},
    {env::kRound, VariableReader::kTrainer},  // names the round's key space in the store
    {env::kStorePath, VariableReader::kTrainer},
    {env::kHeartbeatFd, VariableReader::kTrainer},
    {env::kProgress, VariableReader::kTrainer},
    {env::kOmpNumThreads, VariableReader::kTrainer},
    {env::kUseAgentStore, VariableReader::kTrainer},
    {env::kElasticRestartCount, VariableReader::kTrainer},
    {env::kElasticMaxRestarts, VariableReader::kTrainer},  // under torchrun, for WorkerIdentity::max_restarts
    {env::kElasticRunId, VariableReader::kTorchPython},
    {env::kElasticErrorFile, VariableReader::kTorchPython},                // under --log-dir
    {env::kNcclAsyncErrorHandling, VariableReader::kTorchPython},          // unless set
    {env::kNcclAsyncErrorHandlingBefore22, VariableReader::kTorchPython},  // for a script's torch before 2.2
};

}  // namespace ddp
