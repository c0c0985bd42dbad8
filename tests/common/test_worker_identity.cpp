// Who a worker is: the worker's side of the launcher contract (ddp-train reads every variable the
// contract says it reads), the launcher's side read back, and Slurm's two modes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "ddp/common/error.h"
#include "ddp/common/slurm_lists.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"
#include "ddp/common/worker_identity.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

using Environment = std::map<std::string, std::string>;

// A test's environment as an EnvironmentLookup.
EnvironmentLookup lookup_in(const Environment& environment) {
  return [&environment](const char* name) -> const char* {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  };
}

WorkerIdentity identity_of(const Environment& environment) { return worker_identity_from(lookup_in(environment)); }

std::optional<SlurmLayout> layout_of(const Environment& environment) { return slurm_layout(lookup_in(environment)); }

// Sets a variable for one scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedVariable() { unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

TEST_CASE("worker_identity_from reads the contract's variables", "[common][contract]") {
  WorkerIdentity read = identity_of({{env::kRank, "3"}, {env::kWorldSize, "4"}, {env::kLocalRank, "1"},
                                     {env::kLocalWorldSize, "2"}, {env::kMasterAddr, "10.1.2.3"},
                                     {env::kMasterPort, "1234"}, {env::kRestartCount, "5"},
                                     {env::kUseAgentStore, "True"}, {env::kRunId, "job7"}, {env::kStorePath, "/tmp/s"},
                                     {env::kGroupRank, "1"}, {env::kGroupWorldSize, "3"}, {env::kMaxRestarts, "6"}});
  CHECK(read.node_rank == 1);
  CHECK(read.node_count == 3);
  CHECK(read.rank == 3);
  CHECK(read.world_size == 4);
  CHECK(read.local_rank == 1);
  CHECK(read.local_world_size == 2);
  CHECK(read.master_addr == "10.1.2.3");
  CHECK(read.master_port == 1234);
  CHECK(read.restart_count == 5);
  CHECK(read.max_restarts == 6);
  CHECK(read.launcher_store);
  CHECK(read.run_id == "job7");
  CHECK(read.store_path == "/tmp/s");
}

TEST_CASE("without a launcher: one process, the default port, torch elastic's restart count", "[common][contract]") {
  WorkerIdentity alone = identity_of({});
  CHECK(alone.rank == 0);
  CHECK(alone.world_size == 1);
  CHECK(alone.master_port == kDefaultMasterPort);
  CHECK(alone.local_world_size == 0);  // unknown: placement must not count GPUs per node
  CHECK(alone.node_rank == -1);
  CHECK(identity_of({{env::kElasticRestartCount, "2"}}).restart_count == 2);
  CHECK(identity_of({{env::kElasticMaxRestarts, "4"}}).max_restarts == 4);  // under torchrun
  CHECK_THROWS_WITH(identity_of({{env::kElasticRestartCount, "2"}, {env::kRank, "x"}}),
                    Contains("RANK: expected a non-negative integer, got 'x'"));
}

TEST_CASE("worker_identity_from_environment reads this process's environment", "[common][contract]") {
  ScopedVariable rank(env::kRank, "1"), world(env::kWorldSize, "2");
  WorkerIdentity read = worker_identity_from_environment();
  CHECK(read.rank == 1);
  CHECK(read.world_size == 2);
}

TEST_CASE("what the launcher writes, the worker reads back as the same identity", "[common][contract]") {
  WorkerIdentity written;
  written.rank = 5;
  written.local_rank = 1;
  written.world_size = 8;
  written.local_world_size = 4;
  written.node_rank = 1;
  written.node_count = 2;
  written.master_addr = "node0";
  written.master_port = 29511;
  written.run_id = "abc";
  written.restart_count = 2;
  written.max_restarts = 3;
  written.store_path = "/tmp/store";
  written.launcher_store = true;
  auto variables = worker_variables(written);
  Environment environment(variables.begin(), variables.end());
  CHECK(identity_of(environment) == written);

  // Without a store directory, and with rank 0 hosting the store: still the same.
  written.store_path.clear();
  written.launcher_store = false;
  variables = worker_variables(written);
  CHECK(variables.count(env::kStorePath) == 0);
  CHECK(variables.count(env::kUseAgentStore) == 0);
  CHECK(identity_of(Environment(variables.begin(), variables.end())) == written);
}

TEST_CASE("validate checks the ranges and keeps its messages", "[common][contract]") {
  WorkerIdentity id;
  CHECK_NOTHROW(validate(id));
  id.world_size = 2;
  id.rank = 2;
  CHECK_THROWS_WITH(validate(id), "rank 2 is out of range for world size 2");
  id.rank = 1;
  id.master_port = 0;
  CHECK_THROWS_WITH(validate(id), "master port 0 cannot be shared by several ranks");
  id.store_path = "/tmp/s";
  CHECK_NOTHROW(validate(id));
  id.master_port = 70000;
  CHECK_THROWS_WITH(validate(id), "master port must be 0..65535, got 70000");
  id.world_size = 0;
  CHECK_THROWS_WITH(validate(id), "world size must be >= 1, got 0");
}

TEST_CASE("a Slurm task without RANK takes its identity from Slurm's variables (mode B)", "[common][slurm]") {
  Environment slurm{{"SLURM_JOB_ID", "31337"},         {"SLURM_STEP_ID", "4"},   {"SLURM_PROCID", "5"},
                    {"SLURM_NTASKS", "8"},             {"SLURM_LOCALID", "1"},   {"SLURM_NODEID", "1"},
                    {"SLURM_STEP_NUM_TASKS", "6"},  // the step's 6 of the job's 8 (srun -E)
                    {"SLURM_STEP_TASKS_PER_NODE", "4,2"}, {"SLURM_STEP_NODELIST", "cn[07-08]"},
                    {"SLURM_STEP_NUM_NODES", "2"}};
  WorkerIdentity task = identity_of(slurm);
  CHECK(task.rank == 5);
  CHECK(task.world_size == 6);
  CHECK(task.local_rank == 1);
  CHECK(task.local_world_size == 2);  // node 1's share of "4,2"
  CHECK(task.node_rank == 1);
  CHECK(task.node_count == 2);
  CHECK(task.master_addr == "cn07");
  CHECK(task.master_port == slurm_master_port(31337, "4"));
  // Steps of one job at once on a node (a sweep of srun -n1 steps) meet on ports of their own.
  CHECK(slurm_master_port(31337, "0") != slurm_master_port(31337, "1"));
  CHECK(slurm_master_port(31337, "0") == slurm_master_port(31337, nullptr));
  CHECK(slurm_master_port(31337, "batch") == slurm_master_port(31337, nullptr));
  CHECK(task.run_id == "slurm-31337.4");
  CHECK_FALSE(task.launcher_store);  // rank 0 hosts the store itself
  {
    Environment told = slurm;
    told[env::kMasterAddr] = "10.9.8.7";
    told[env::kMasterPort] = "4321";
    WorkerIdentity read = identity_of(told);
    CHECK(read.master_addr == "10.9.8.7");
    CHECK(read.master_port == 4321);
  }
  {
    // The run id names a directory: a step id with control characters is made printable, as in mode A.
    Environment odd = slurm;
    odd["SLURM_STEP_ID"] = "4\x1b[2J";
    CHECK(identity_of(odd).run_id == "slurm-31337." + printable("4\x1b[2J", 20));
    CHECK(identity_of(odd).run_id.find('\x1b') == std::string::npos);
  }
  // Under ddprun (RANK set), Slurm's variables are the launcher's business, not the worker's.
  slurm[env::kRank] = "0";
  CHECK(identity_of(slurm).world_size == 1);
}

TEST_CASE("a Slurm job step's variables give the layout, step values before job values", "[common][slurm]") {
  CHECK_FALSE(layout_of({}).has_value());
  CHECK_FALSE(layout_of({{"SLURM_JOB_ID", "7"}}).has_value());  // an allocation, not a job step on a node
  auto layout = layout_of({{"SLURM_JOB_ID", "123456"}, {"SLURM_STEP_ID", "2"}, {"SLURM_NODEID", "1"},
                           {"SLURM_NNODES", "4"}, {"SLURM_STEP_NUM_NODES", "2"},
                           {"SLURM_JOB_NODELIST", "gpu[01-04]"}, {"SLURM_STEP_NODELIST", "gpu[03-04]"}});
  REQUIRE(layout.has_value());
  CHECK(layout->nnodes == 2);
  CHECK(layout->node_rank == 1);
  CHECK(layout->master_addr == "gpu03");
  CHECK(layout->master_port == 20000 + (3456 + 1009 * 2) % 10000);
  CHECK(layout->run_id == "slurm-123456.2");
  CHECK(layout->sources.at("--nnodes") == "2 (SLURM_STEP_NUM_NODES)");
  CHECK(layout->sources.at("--node-rank") == "1 (SLURM_NODEID)");
  CHECK(layout->sources.at("--master-addr") == "gpu03 (first of SLURM_STEP_NODELIST)");
  CHECK(layout->sources.at("--master-port") == "25474 (20000 + (SLURM_JOB_ID + 1009 × SLURM_STEP_ID) % 10000)");
  CHECK(layout->sources.at("--run-id") == "slurm-123456.2 (SLURM_JOB_ID.SLURM_STEP_ID)");
  // Note [Slurm's batch step]: a batch script of one node is that node; of several, it is no step.
  auto batch = layout_of({{"SLURM_JOB_ID", "9"}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "1"},
                          {"SLURM_JOB_NODELIST", "a1"}});
  REQUIRE(batch.has_value());
  CHECK(batch->nnodes == 1);
  CHECK(batch->master_addr == "a1");
  CHECK(batch->run_id == "slurm-9");
  CHECK(batch->nnodes_refusal.empty());
  auto several = layout_of({{"SLURM_JOB_ID", "9"}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "3"},
                            {"SLURM_JOB_NODELIST", "a[1-2],b3"}});
  REQUIRE(several.has_value());
  CHECK(several->nnodes_refusal ==
        "inside Slurm job 9 but in no job step (no SLURM_STEP_ID: its batch script or an salloc shell), where only "
        "this process runs, while the job has 3 nodes (SLURM_NNODES): start one per node or task with srun, as in "
        "`srun --ntasks-per-node=1 ddprun --nproc-per-node=N CONFIG` (docs/clusters.md); or --standalone for this "
        "node alone");
  // A step of several tasks on a node would start several ddpruns there.
  auto crowded = layout_of({{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NODEID", "1"},
                            {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NODELIST", "a[1-2]"},
                            {"SLURM_STEP_TASKS_PER_NODE", "1,2"}});
  REQUIRE(crowded.has_value());
  CHECK_THAT(crowded->node_rank_refusal,
             Catch::StartsWith("this Slurm job step runs 2 tasks on this node (SLURM_STEP_TASKS_PER_NODE=1,2), and "
                               "each would be a ddprun starting the node's ranks: run one a node"));
  // Node 0 of that step refuses too, at once, rather than wait out the rendezvous for node 1.
  auto beside = layout_of({{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NODEID", "0"},
                           {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NODELIST", "a[1-2]"},
                           {"SLURM_STEP_TASKS_PER_NODE", "1,2"}});
  REQUIRE(beside.has_value());
  CHECK_THAT(beside->node_rank_refusal, Catch::StartsWith("this Slurm job step runs 2 tasks on node 1 ("));
  CHECK(layout_of({{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NODEID", "1"}, {"SLURM_STEP_NUM_NODES", "2"},
                   {"SLURM_STEP_NODELIST", "a[1-2]"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}})
            ->node_rank_refusal.empty());
  CHECK_THAT(identity_of({{"SLURM_JOB_ID", "9"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).outside_slurm_step,
             Contains("while the job has 2 tasks (SLURM_NTASKS): start one per node or task with srun, as in "
                      "`srun --ntasks-per-node=N ddp-train CONFIG`"));
  CHECK(identity_of({{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}})
            .outside_slurm_step.empty());
  // sbatch --nodes=2 without --ntasks: no SLURM_NTASKS, but two nodes.
  CHECK_THAT(identity_of({{"SLURM_JOB_ID", "9"},
                          {"SLURM_PROCID", "0"},
                          {"SLURM_NNODES", "2"},
                          {"SLURM_TASKS_PER_NODE", "1(x2)"},
                          {"SLURM_JOB_NODELIST", "a[1-2]"}})
                 .outside_slurm_step,
             Contains("while the job has 2 nodes (SLURM_NNODES): start one per node or task with srun"));
  CHECK(identity_of({{"SLURM_JOB_ID", "9"}, {"SLURM_PROCID", "0"}, {"SLURM_NNODES", "1"}, {"SLURM_NTASKS", "1"}})
            .outside_slurm_step.empty());
  CHECK_THROWS_WITH(layout_of({{"SLURM_JOB_ID", "x"}, {"SLURM_NODEID", "0"}}),
                    Contains("SLURM_JOB_ID=x is not a count Slurm would set"));
  CHECK_THROWS_WITH(layout_of({{"SLURM_JOB_ID", "1"}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "1"}}),
                    Contains("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set"));
  // Job ids of large clusters pass 2^20; mode A and mode B read them alike.
  auto big = layout_of({{"SLURM_JOB_ID", "31234567"}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "1"},
                        {"SLURM_JOB_NODELIST", "n1"}});
  REQUIRE(big.has_value());
  CHECK(big->master_port == slurm_master_port(31234567));
  CHECK(identity_of({{"SLURM_JOB_ID", "31234567"}, {"SLURM_PROCID", "0"}}).run_id == "slurm-31234567");
}

}  // namespace DDP_TEST_FILE
