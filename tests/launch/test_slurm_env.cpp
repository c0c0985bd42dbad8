// Mode A under Slurm: ddprun takes the node count, node rank, master address and port, and run id
// from a job step's environment (read by slurm_layout, tested in tests/common/test_worker_identity.cpp),
// and options win over them.
#include <catch2/catch.hpp>

#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

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

}  // namespace DDP_TEST_FILE
