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

TEST_CASE("in a Slurm batch script of several nodes or tasks, what the job would give is refused, and what the command "
          "line gives runs", "[launch][slurm]") {
  // Note [Slurm's batch step]: no SLURM_STEP_ID, while the job's variables describe the allocation.
  TempDir dir;
  std::string batch = "SLURM_JOB_ID=4242 SLURM_NODEID=0 SLURM_NNODES=2 SLURM_JOB_NODELIST=localhost,n2 SLURM_PROCID=0 "
                      "SLURM_NTASKS=2 OMP_NUM_THREADS=1 ";
  auto refused = run_shell(batch + bin("ddprun") + " --nproc-per-node 1 -- true", std::chrono::seconds(30));
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains("ddprun: error: inside Slurm job 4242 but in no job step") &&
                              Contains("while the job has 2 nodes (SLURM_NNODES)") && Contains("--standalone"));
  // A port of its own: Slurm's (24242 for job 4242) is the other test's, which may run beside.
  auto given = run_shell(batch + bin("ddprun") + " --nnodes 1 --node-rank 0 --nproc-per-node 1 --master-port " +
                             std::to_string(free_port()) + " -- true",
                         std::chrono::seconds(30));
  INFO(given.out << given.err);
  CHECK(given.exit_code == 0);

  const std::string config = std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml";
  auto help = run_shell(batch + bin("ddp-train") + " --help", std::chrono::seconds(30));
  CHECK(help.exit_code == 0);
  auto print = run_shell(batch + bin("ddp-train") + " --print-config " + config, std::chrono::seconds(30));
  CHECK(print.exit_code == 0);
  auto task = run_shell(batch + bin("ddp-train") + " " + config + " --set run.output_dir=" + dir.file("task"),
                        std::chrono::seconds(30));
  CHECK(task.exit_code == 2);
  CHECK_THAT(task.err, Contains("ddp-train: rank 0: error: inside Slurm job 4242 but in no job step") &&
                           Contains("while the job has 2 tasks (SLURM_NTASKS)"));
  auto alone = run_shell(batch + bin("ddp-train") + " --rank 0 --world-size 1 " + config +
                             " --set train.max_steps=1 --set data.eval_split=none --set run.output_dir=" + dir.file("alone"),
                         std::chrono::seconds(60));
  INFO(alone.out << alone.err);
  CHECK(alone.exit_code == 0);
}

}  // namespace DDP_TEST_FILE
