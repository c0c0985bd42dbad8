#include "ddp/common/worker_identity.h"

#include <algorithm>
#include <cstdlib>

#include "ddp/common/error.h"
#include "ddp/common/slurm_lists.h"
#include "ddp/common/text.h"

namespace ddp {
namespace {

// Slurm's job ids are 32-bit (federated clusters use the high bits); every other count is far smaller.
constexpr long long kMaxJobId = 4294967295LL;
constexpr long long kMaxCount = 1 << 30;

// A variable set by whoever started this worker: a non-negative integer, else the fallback.
long long int_variable(const EnvironmentLookup& lookup, const char* name, long long fallback,
                       long long max = kMaxCount) {
  const char* value = lookup(name);
  if (!value) return fallback;
  auto parsed = parse_int(value);
  if (!parsed || *parsed < 0 || *parsed > max)
    throw UserError(std::string("environment variable ") + name + ": expected a non-negative integer, got '" + value +
                    "'");
  return *parsed;
}

int small_variable(const EnvironmentLookup& lookup, const char* name, int fallback) {
  return static_cast<int>(int_variable(lookup, name, fallback));
}

// The first of two variables that is set: a job step's value before its job's.
const char* step_or_job(const EnvironmentLookup& lookup, const char* step_name, const char* job_name) {
  return lookup(step_name) ? step_name : job_name;
}

// Mode B of Slurm (`srun --ntasks-per-node=N ddp-train CONFIG`, no launcher): each task is a rank,
// and the variables torchrun would set come from Slurm's. Rank 0 hosts the store.
WorkerIdentity from_slurm_task(const EnvironmentLookup& lookup) {
  WorkerIdentity id;
  id.rank = small_variable(lookup, slurm::kProcId, 0);
  // The step's tasks: under `srun -E` (or an sbatch of more tasks) SLURM_NTASKS is the job's.
  id.world_size = small_variable(lookup, slurm::kStepNumTasks,
                                 small_variable(lookup, slurm::kNtasks, small_variable(lookup, slurm::kNprocs, 1)));
  id.local_rank = small_variable(lookup, slurm::kLocalId, 0);
  id.node_rank = small_variable(lookup, slurm::kNodeId, 0);
  id.node_count = small_variable(lookup, step_or_job(lookup, slurm::kStepNumNodes, slurm::kNnodes), 1);
  if (const char* per_node = lookup(step_or_job(lookup, slurm::kStepTasksPerNode, slurm::kTasksPerNode))) {
    auto counts = expand_counts(per_node);
    if (static_cast<std::size_t>(id.node_rank) < counts.size()) id.local_world_size = counts[id.node_rank];
  }
  if (const char* list = lookup(step_or_job(lookup, slurm::kStepNodeList, slurm::kJobNodeList)))
    id.master_addr = expand_hostlist(list).front();
  long long job = int_variable(lookup, slurm::kJobId, 0, kMaxJobId);
  id.master_port = slurm_master_port(job, lookup(slurm::kStepId));
  id.run_id = slurm_run_id(job, lookup(slurm::kStepId));
  id.restart_count = small_variable(lookup, slurm::kRestartCount, 0);  // a requeued job starts again from 0 otherwise
  id.requeues = id.restart_count;
  return id;
}

// Note [Slurm's batch step]: a batch script (or an salloc shell) is no job step: it runs once, on
// the first node of the allocation, without SLURM_STEP_ID, while the job's variables describe the
// whole allocation. Read as a step, it would be node 0 (or task 0) of N and wait out the rendezvous
// for the others, which nobody started. One such process per node comes from srun.
std::string outside_a_step(const char* job, const std::string& count, const std::string& fix) {
  return std::string("inside Slurm job ") + printable(job ? job : "", 20) + " but in no job step (no " +
         slurm::kStepId + ": its batch script or an salloc shell), where only this process runs, while the job " +
         "has " + count + ": start one per node or task with srun, as in `" + fix + "` (docs/clusters.md)";
}

// ddprun's variables (torchrun's and ours); without them, a single process started by hand.
WorkerIdentity from_launcher(const EnvironmentLookup& lookup) {
  WorkerIdentity id;
  id.rank = small_variable(lookup, env::kRank, 0);
  id.world_size = small_variable(lookup, env::kWorldSize, 1);
  id.local_rank = small_variable(lookup, env::kLocalRank, id.rank);
  id.local_world_size = small_variable(lookup, env::kLocalWorldSize, 0);  // 0: unknown (started by hand)
  id.node_rank = lookup(env::kGroupRank) ? small_variable(lookup, env::kGroupRank, 0) : -1;
  id.node_count = small_variable(lookup, env::kGroupWorldSize, 1);
  id.master_port = small_variable(lookup, env::kMasterPort, kDefaultMasterPort);
  id.restart_count = small_variable(lookup, env::kRestartCount, small_variable(lookup, env::kElasticRestartCount, 0));
  id.max_restarts = small_variable(lookup, env::kMaxRestarts, small_variable(lookup, env::kElasticMaxRestarts, 0));
  id.round = small_variable(lookup, env::kRound, id.restart_count);
  id.requeues = small_variable(lookup, slurm::kRestartCount, 0);  // set by Slurm, inherited through ddprun
  if (const char* addr = lookup(env::kMasterAddr)) id.master_addr = addr;
  if (const char* agent = lookup(env::kUseAgentStore))
    id.launcher_store = std::string(agent) == "True" || std::string(agent) == "1";
  if (const char* run = lookup(env::kRunId)) id.run_id = run;
  if (const char* path = lookup(env::kStorePath)) id.store_path = path;
  return id;
}

}  // namespace

const char* process_variable(const char* name) { return std::getenv(name); }

WorkerIdentity worker_identity_from(const EnvironmentLookup& lookup) {
  // Under ddprun (RANK set), Slurm's variables are the launcher's business, not the worker's.
  if (lookup(env::kRank) || !lookup(slurm::kProcId) || !lookup(slurm::kJobId)) return from_launcher(lookup);
  WorkerIdentity id = from_slurm_task(lookup);
  // `sbatch --nodes=2` without --ntasks sets no SLURM_NTASKS: its node count says it as well (was:
  // this process trained alone, as a world of 1, and exited 0).
  const std::string count = id.world_size > 1   ? std::to_string(id.world_size) + " tasks (" + slurm::kNtasks + ")"
                            : id.node_count > 1 ? std::to_string(id.node_count) + " nodes (" + slurm::kNnodes + ")"
                                                : "";
  if (!lookup(slurm::kStepId) && !count.empty())
    id.outside_slurm_step = outside_a_step(lookup(slurm::kJobId), count, "srun --ntasks-per-node=N ddp-train CONFIG") +
                            "; or give --world-size 1 --rank 0 for this process alone";
  if (const char* addr = lookup(env::kMasterAddr)) id.master_addr = addr;
  id.master_port = small_variable(lookup, env::kMasterPort, id.master_port);
  return id;
}

WorkerIdentity worker_identity_from_environment() { return worker_identity_from(process_variable); }

std::map<std::string, std::string> worker_variables(const WorkerIdentity& id) {
  auto str = [](int value) { return std::to_string(value); };
  std::map<std::string, std::string> variables{
      {env::kRank, str(id.rank)},
      {env::kLocalRank, str(id.local_rank)},
      {env::kWorldSize, str(id.world_size)},
      {env::kLocalWorldSize, str(id.local_world_size)},
      {env::kGroupRank, str(id.node_rank)},
      {env::kGroupWorldSize, str(id.node_count)},
      {env::kMasterAddr, id.master_addr},
      {env::kMasterPort, str(id.master_port)},
      {env::kRunId, id.run_id},
      {env::kRestartCount, str(id.restart_count)},
      {env::kMaxRestarts, str(id.max_restarts)},
      {env::kRound, str(id.round)},
      // The worker group's restarts so far, membership changes included: torch's env:// keys its
      // store space "/worker/attempt_N" by it, and a round of other members reusing the last
      // round's keys would read stale Gloo addresses, or wait forever on its barrier's count
      // (torchrun gives each round a fresh store instead). The failures alone are DDPRUN_RESTART_COUNT.
      {env::kElasticRestartCount, str(id.round)},
      {env::kElasticMaxRestarts, str(id.max_restarts)},
      {env::kElasticRunId, id.run_id},
  };
  // torch.distributed's env:// init then joins the launcher's store as a client under
  // "/worker/attempt_N/" instead of trying to bind MASTER_PORT itself.
  if (id.launcher_store) variables[env::kUseAgentStore] = "True";
  if (!id.store_path.empty()) variables[env::kStorePath] = id.store_path;
  return variables;
}

void validate(const WorkerIdentity& id) {
  check_user(id.world_size >= 1, "world size must be >= 1, got " + std::to_string(id.world_size));
  check_user(id.rank >= 0 && id.rank < id.world_size,
             "rank " + std::to_string(id.rank) + " is out of range for world size " + std::to_string(id.world_size));
  check_user(id.master_port >= 0 && id.master_port <= 65535,
             "master port must be 0..65535, got " + std::to_string(id.master_port));
  check_user(id.world_size == 1 || id.master_port > 0 || !id.store_path.empty(),
             "master port 0 cannot be shared by several ranks");
}

std::string slurm_run_id(long long job_id, const char* step_id) {
  std::string id = "slurm-" + std::to_string(job_id);
  if (step_id) {
    id += '.';
    id += printable(step_id, 20);
  }
  return id;
}

std::optional<SlurmLayout> slurm_layout(const EnvironmentLookup& lookup) {
  const char* job = lookup(slurm::kJobId);
  const char* node = lookup(slurm::kNodeId);
  if (!job || !node) return std::nullopt;
  auto number = [&](const char* name, const char* value, long long low, long long high) {
    auto parsed = value ? parse_int(value) : std::nullopt;
    if (!parsed || *parsed < low || *parsed > high)
      throw UserError(std::string(name) + "=" + (value ? printable(value, 40) : "") +
                      " is not a count Slurm would set");
    return *parsed;
  };
  constexpr long long kMaxNodes = 1 << 20;
  SlurmLayout layout;
  long long job_id = number(slurm::kJobId, job, 0, kMaxJobId);
  const char* nodes_name = step_or_job(lookup, slurm::kStepNumNodes, slurm::kNnodes);
  layout.nnodes = static_cast<int>(number(nodes_name, lookup(nodes_name), 1, kMaxNodes));
  layout.node_rank = static_cast<int>(number(slurm::kNodeId, node, 0, kMaxNodes));
  if (!lookup(slurm::kStepId) && layout.nnodes > 1)
    layout.nnodes_refusal = outside_a_step(job, std::to_string(layout.nnodes) + " nodes (" + nodes_name + ")",
                                           "srun --ntasks-per-node=1 ddprun --nproc-per-node=N CONFIG") +
                            "; or --standalone for this node alone";
  // ddprun starts its node's ranks itself: a step of several tasks on this node would start
  // several ddpruns, each taking this node's rank, which fail on each other's port or node rank.
  // Any node's, not only this one's: every node reads the same list and refuses at once, rather than
  // the others waiting out the rendezvous for the crowded node's ddpruns.
  if (const char* per_node = lookup(slurm::kStepTasksPerNode)) {
    auto counts = expand_counts(per_node);
    auto crowded = std::find_if(counts.begin(), counts.end(), [](int count) { return count > 1; });
    if (crowded != counts.end()) {
      const auto index = static_cast<int>(crowded - counts.begin());
      layout.node_rank_refusal =
          "this Slurm job step runs " + std::to_string(*crowded) + " tasks on " +
          (index == layout.node_rank ? std::string("this node") : "node " + std::to_string(index)) + " (" +
          slurm::kStepTasksPerNode + "=" + printable(per_node, 40) + "), and each would be a ddprun starting the "
          "node's ranks: run one a node (srun --ntasks-per-node=1 ddprun --nproc-per-node=N), or one task a rank "
          "without ddprun (srun --ntasks-per-node=N ddp-train); or give --node-rank, or --no-slurm";
    }
  }
  const char* list_name = step_or_job(lookup, slurm::kStepNodeList, slurm::kJobNodeList);
  const char* list = lookup(list_name);
  if (!list)
    throw UserError(std::string("inside a Slurm job, but neither ") + slurm::kStepNodeList + " nor " +
                    slurm::kJobNodeList + " is set");
  layout.master_addr = expand_hostlist(list).front();
  layout.master_port = slurm_master_port(job_id, lookup(slurm::kStepId));
  layout.run_id = slurm_run_id(job_id, lookup(slurm::kStepId));
  auto from = [](const std::string& value, const std::string& source) { return value + " (" + source + ")"; };
  layout.sources = {
      {"--nnodes", from(std::to_string(layout.nnodes), nodes_name)},
      {"--node-rank", from(std::to_string(layout.node_rank), slurm::kNodeId)},
      {"--master-addr", from(layout.master_addr, std::string("first of ") + list_name)},
      {"--master-port", from(std::to_string(layout.master_port), std::string("20000 + (") + slurm::kJobId + " + 1009 × " +
                                                                    slurm::kStepId + ") % 10000")},
      {"--run-id", from(layout.run_id, std::string(slurm::kJobId) + "." + slurm::kStepId)}};
  return layout;
}

}  // namespace ddp
