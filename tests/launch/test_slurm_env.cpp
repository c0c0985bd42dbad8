// Mode A under Slurm: the node count, node rank, master address and port, and run id that ddprun
// derives from a job step's environment, and what wins over them.
#include <catch2/catch.hpp>

#include <map>

#include "ddp/common/error.h"
#include "ddp/launch/slurm_env.h"
#include "support/subprocess.h"

using namespace ddp::test;
using Catch::Contains;

namespace {

using Environment = std::map<std::string, std::string>;

std::optional<ddp::SlurmLayout> layout_of(const Environment& environment) {
  return ddp::slurm_layout([&](const char* name) -> const char* {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  });
}

}  // namespace

TEST_CASE("a Slurm job step's variables give the layout, step values before job values", "[launch][slurm]") {
  CHECK_FALSE(layout_of({}).has_value());
  CHECK_FALSE(layout_of({{"SLURM_JOB_ID", "7"}}).has_value());  // an allocation, not a job step on a node
  auto layout = layout_of({{"SLURM_JOB_ID", "123456"}, {"SLURM_STEP_ID", "2"}, {"SLURM_NODEID", "1"},
                           {"SLURM_NNODES", "4"}, {"SLURM_STEP_NUM_NODES", "2"},
                           {"SLURM_JOB_NODELIST", "gpu[01-04]"}, {"SLURM_STEP_NODELIST", "gpu[03-04]"}});
  REQUIRE(layout.has_value());
  CHECK(layout->nnodes == 2);
  CHECK(layout->node_rank == 1);
  CHECK(layout->master_addr == "gpu03");
  CHECK(layout->master_port == 20000 + 123456 % 10000);
  CHECK(layout->run_id == "slurm-123456.2");
  CHECK(layout->sources.at("--nnodes") == "2 (SLURM_STEP_NUM_NODES)");
  CHECK(layout->sources.at("--master-addr") == "gpu03 (first of SLURM_STEP_NODELIST)");
  auto batch = layout_of({{"SLURM_JOB_ID", "9"}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "3"},
                          {"SLURM_JOB_NODELIST", "a[1-2],b3"}});
  REQUIRE(batch.has_value());
  CHECK(batch->nnodes == 3);
  CHECK(batch->master_addr == "a1");
  CHECK(batch->run_id == "slurm-9");
  CHECK_THROWS_WITH(layout_of({{"SLURM_JOB_ID", "x"}, {"SLURM_NODEID", "0"}}),
                    Contains("SLURM_JOB_ID=x is not a count Slurm would set"));
  CHECK_THROWS_WITH(layout_of({{"SLURM_JOB_ID", "1"}, {"SLURM_NODEID", "0"}, {"SLURM_NNODES", "1"}}),
                    Contains("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set"));
}

TEST_CASE("ddprun in a Slurm job step takes its layout from it and says so, while options and --no-slurm win",
          "[launch][slurm]") {
  std::string slurm = "SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_NODEID=0 SLURM_NNODES=1 SLURM_JOB_NODELIST=localhost ";
  std::string show = " -- sh -c 'echo $MASTER_ADDR:$MASTER_PORT $DDPRUN_RUN_ID $WORLD_SIZE'";
  auto derived = run_shell(slurm + bin("ddprun") + " --nproc-per-node 1" + show, std::chrono::seconds(30));
  INFO(derived.out << derived.err);
  CHECK(derived.exit_code == 0);
  CHECK_THAT(derived.out, Contains("localhost:24242 slurm-4242.0 1"));
  CHECK_THAT(derived.err, Contains("ddprun: Slurm job step: --nnodes 1 (SLURM_NNODES), --node-rank 0 (SLURM_NODEID)"));

  std::string port = std::to_string(free_port());
  auto explicit_port = run_shell(slurm + bin("ddprun") + " --nproc-per-node 1 --master-port " + port + show,
                                 std::chrono::seconds(30));
  INFO(explicit_port.out << explicit_port.err);
  CHECK_THAT(explicit_port.out, Contains("localhost:" + port + " slurm-4242.0 1"));

  auto off = run_shell(slurm + bin("ddprun") + " --no-slurm --standalone --nproc-per-node 1" + show,
                       std::chrono::seconds(30));
  INFO(off.out << off.err);
  CHECK_THAT(off.err, !Contains("Slurm job step"));
  CHECK_THAT(off.out, !Contains("slurm-4242"));
}
