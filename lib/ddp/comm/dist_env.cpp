#include "ddp/comm/dist_env.h"

#include <cstdlib>

#include "ddp/common/error.h"
#include "ddp/common/slurm_lists.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

int int_variable(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value) return fallback;
  auto parsed = parse_int(value);
  if (!parsed || *parsed < 0 || *parsed > 1 << 30)
    throw UserError(std::string("environment variable ") + name + ": expected a non-negative integer, got '" + value +
                    "'");
  return static_cast<int>(*parsed);
}

// Mode B of Slurm (`srun --ntasks-per-node=N ddp-train CONFIG`, no launcher): each task is a rank,
// and the variables torchrun would set come from Slurm's. MASTER_ADDR / MASTER_PORT still win.
void from_slurm_task(DistEnv& env) {
  env.rank = int_variable("SLURM_PROCID", 0);
  env.world_size = int_variable("SLURM_NTASKS", int_variable("SLURM_NPROCS", 1));
  env.local_rank = int_variable("SLURM_LOCALID", 0);
  env.node_rank = int_variable("SLURM_NODEID", 0);
  const char* per_node = std::getenv("SLURM_STEP_TASKS_PER_NODE");
  if (!per_node) per_node = std::getenv("SLURM_TASKS_PER_NODE");
  if (per_node) {
    auto counts = expand_counts(per_node);
    auto node = static_cast<std::size_t>(int_variable("SLURM_NODEID", 0));
    if (node < counts.size()) env.local_world_size = counts[node];
  }
  const char* list = std::getenv("SLURM_STEP_NODELIST");
  if (!list) list = std::getenv("SLURM_JOB_NODELIST");
  if (list) env.master_addr = expand_hostlist(list).front();
  long long job = int_variable("SLURM_JOB_ID", 0);
  env.master_port = slurm_master_port(job);
  const char* step = std::getenv("SLURM_STEP_ID");
  env.run_id = "slurm-" + std::to_string(job) + (step ? std::string(".") + step : "");
  env.restart_count = int_variable("SLURM_RESTART_COUNT", 0);  // a requeued job starts again from 0 otherwise
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv env;
  if (!std::getenv(env::kRank) && std::getenv("SLURM_PROCID") && std::getenv("SLURM_JOB_ID")) {
    from_slurm_task(env);
    if (const char* addr = std::getenv(env::kMasterAddr)) env.master_addr = addr;
    env.master_port = int_variable(env::kMasterPort, env.master_port);
    return env;
  }
  env.rank = int_variable(env::kRank, 0);
  env.world_size = int_variable(env::kWorldSize, 1);
  env.local_rank = int_variable(env::kLocalRank, env.rank);
  env.local_world_size = int_variable(env::kLocalWorldSize, 0);  // 0: unknown (started by hand)
  env.node_rank = std::getenv(env::kGroupRank) ? int_variable(env::kGroupRank, 0) : -1;
  env.master_port = int_variable(env::kMasterPort, kDefaultMasterPort);
  env.restart_count = int_variable(env::kRestartCount, int_variable(env::kElasticRestartCount, 0));
  if (const char* addr = std::getenv(env::kMasterAddr)) env.master_addr = addr;
  if (const char* agent = std::getenv(env::kUseAgentStore))
    env.launcher_store = std::string(agent) == "True" || std::string(agent) == "1";
  if (const char* id = std::getenv(env::kRunId)) env.run_id = id;
  if (const char* path = std::getenv(env::kStorePath)) env.store_path = path;
  return env;
}

void validate(const DistEnv& env) {
  check_user(env.world_size >= 1, "world size must be >= 1, got " + std::to_string(env.world_size));
  check_user(env.rank >= 0 && env.rank < env.world_size,
             "rank " + std::to_string(env.rank) + " is out of range for world size " + std::to_string(env.world_size));
  check_user(env.master_port >= 0 && env.master_port <= 65535,
             "master port must be 0..65535, got " + std::to_string(env.master_port));
  check_user(env.world_size == 1 || env.master_port > 0 || !env.store_path.empty(),
             "master port 0 cannot be shared by several ranks");
}

}  // namespace ddp
