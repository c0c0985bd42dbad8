// The worker's side of the launcher contract: ddp-train reads every variable the contract says it reads.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "ddp/comm/dist_env.h"
#include "ddp/common/error.h"
#include "ddp/common/slurm_lists.h"
#include "ddp/common/worker_contract.h"

using namespace ddp;

namespace {

// Sets a variable for one scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedVariable() { unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

TEST_CASE("dist_env_from_environment reads the contract's variables", "[comm][contract]") {
  ScopedVariable rank(env::kRank, "3"), world(env::kWorldSize, "4"), local(env::kLocalRank, "1"),
      local_world(env::kLocalWorldSize, "2"), addr(env::kMasterAddr, "10.1.2.3"), port(env::kMasterPort, "1234"),
      restart(env::kRestartCount, "5"), agent(env::kUseAgentStore, "True"), id(env::kRunId, "job7"),
      store(env::kStorePath, "/tmp/s"), group(env::kGroupRank, "1");
  DistEnv read = dist_env_from_environment();
  CHECK(read.node_rank == 1);
  CHECK(read.rank == 3);
  CHECK(read.world_size == 4);
  CHECK(read.local_rank == 1);
  CHECK(read.local_world_size == 2);
  CHECK(read.master_addr == "10.1.2.3");
  CHECK(read.master_port == 1234);
  CHECK(read.restart_count == 5);
  CHECK(read.launcher_store);
  CHECK(read.run_id == "job7");
  CHECK(read.store_path == "/tmp/s");
}

TEST_CASE("without a launcher: one process, the default port, torch elastic's restart count", "[comm][contract]") {
  DistEnv alone = dist_env_from_environment();
  CHECK(alone.rank == 0);
  CHECK(alone.world_size == 1);
  CHECK(alone.master_port == kDefaultMasterPort);
  ScopedVariable elastic(env::kElasticRestartCount, "2");
  CHECK(dist_env_from_environment().restart_count == 2);
  ScopedVariable bad(env::kRank, "x");
  CHECK_THROWS_WITH(dist_env_from_environment(), Catch::Contains("RANK: expected a non-negative integer, got 'x'"));
}

TEST_CASE("a Slurm task without RANK takes its identity from Slurm's variables (mode B)", "[comm][slurm]") {
  ScopedVariable job("SLURM_JOB_ID", "31337"), step("SLURM_STEP_ID", "4"), procid("SLURM_PROCID", "5"),
      ntasks("SLURM_NTASKS", "6"), localid("SLURM_LOCALID", "1"), node("SLURM_NODEID", "1"),
      per_node("SLURM_STEP_TASKS_PER_NODE", "4,2"), list("SLURM_STEP_NODELIST", "cn[07-08]");
  DistEnv task = dist_env_from_environment();
  CHECK(task.rank == 5);
  CHECK(task.world_size == 6);
  CHECK(task.local_rank == 1);
  CHECK(task.local_world_size == 2);  // node 1's share of "4,2"
  CHECK(task.master_addr == "cn07");
  CHECK(task.master_port == slurm_master_port(31337));
  CHECK(task.run_id == "slurm-31337.4");
  CHECK_FALSE(task.launcher_store);  // rank 0 hosts the store itself
  {
    ScopedVariable addr(env::kMasterAddr, "10.9.8.7"), port(env::kMasterPort, "4321");
    DistEnv told = dist_env_from_environment();
    CHECK(told.master_addr == "10.9.8.7");
    CHECK(told.master_port == 4321);
  }
  // Under ddprun (RANK set), Slurm's variables are the launcher's business, not the worker's.
  ScopedVariable rank(env::kRank, "0");
  CHECK(dist_env_from_environment().world_size == 1);
}
