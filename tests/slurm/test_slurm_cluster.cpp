// ddprun under a real Slurm: scripts/slurm/local_cluster.sh starts slurmctld and two slurmd nodes
// (n1 on 127.0.0.2, n2 on 127.0.0.3; or sn1, sn2, names that do not resolve) on this host, and jobs
// go through sbatch, srun and scancel.
// Each test starts its own cluster (about a second) and stops it; ctest runs them one at a time.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "support/subprocess.h"

using namespace ddp::test;
using Catch::Contains;

namespace {

const std::string kScripts = std::string(DDP_SOURCE_DIR) + "/scripts/slurm/";

std::string config(const std::string& name) { return std::string(DDP_SOURCE_DIR) + "/configs/" + name; }

bool same_bytes(const std::string& a, const std::string& b) {
  std::string x = read_file(a), y = read_file(b);
  return !x.empty() && x == y;
}

// The cluster of one test, in a directory of its own; stopped (every daemon and job) on destruction.
class LocalCluster {
 public:
  /// `node_names`: "resolvable" (n1, n2 in the nodes' hosts file) or "unresolvable" (sn1, sn2: only
  /// Slurm knows their addresses).
  explicit LocalCluster(const std::string& node_names = "resolvable") {
    if (geteuid() != 0) {
      why_not_ = "not root (slurmd and munged need it)";
      return;
    }
    auto r = run_shell("NODE_NAMES=" + node_names + " NODES=2 PORT_BASE=17100 " + kScripts + "local_cluster.sh start " + dir_.path() + "/cluster",
                       std::chrono::seconds(300));
    if (r.exit_code != 0) why_not_ = "local_cluster.sh start failed: " + r.err;
  }
  ~LocalCluster() { stop(); }
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  /// Empty when the cluster is up; else why not, for the skip message.
  const std::string& why_not() const { return why_not_; }
  std::string file(const std::string& name) const { return dir_.file(name); }
  std::string cluster_dir() const { return dir_.path() + "/cluster"; }

  /// Runs `script` with SLURM_CONF pointing at this cluster.
  CommandResult shell(const std::string& script, int timeout_s = 300) const {
    return run_shell("export SLURM_CONF=" + cluster_dir() + "/slurm.conf; " + script, std::chrono::seconds(timeout_s));
  }

  CommandResult stop() {
    if (stopped_ || !why_not_.empty()) return {};
    stopped_ = true;
    return run_shell(kScripts + "local_cluster.sh stop " + cluster_dir(), std::chrono::seconds(60));
  }

 private:
  TempDir dir_;
  std::string why_not_;
  bool stopped_ = false;
};

#define SKIP_WITHOUT(cluster)                                    \
  if (!(cluster).why_not().empty()) {                            \
    WARN("skipped: no local Slurm cluster: " << (cluster).why_not()); \
    return;                                                      \
  }

// Shell: waits until job $1 has left the queue, then prints its state line.
const std::string kWaitJob =
    "wait_job() { i=0; while squeue -h -j \"$1\" 2>/dev/null | grep -q . && [ $i -lt 1200 ]; do sleep 0.25; "
    "i=$((i+1)); done; scontrol show job \"$1\" | grep -o 'JobState=[A-Z_]*\\|Restarts=[0-9]*\\|ExitCode=[0-9:]*' "
    "| tr '\\n' ' '; echo; }; ";

// The reference: two ddprun launchers started by hand, --nnodes 2, on this host's loopback.
std::string by_hand(const std::string& out, const std::string& yaml, const std::string& sets) {
  std::string port = std::to_string(free_port());
  std::string launch = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --nnodes 2 --nproc-per-node 2 --master-port " + port +
                       " " + config(yaml) + " --set run.output_dir=" + out + " " + sets;
  auto r = run_shell(launch + " --node-rank 1 >/dev/null 2>&1 & " + launch + " --node-rank 0 >/dev/null 2>&1; wait",
                     std::chrono::seconds(300));
  return r.exit_code == 0 ? out + "/model.pt" : "";
}

// The pid of the ddp-train process with RANK=`rank` writing to `out` (empty if none).
std::string rank_pid(const std::string& out, int rank) {
  return "$(for p in $(pgrep -f '[d]dp-train.*" + out + "'); do tr '\\0' '\\n' </proc/$p/environ | grep -qx RANK=" +
         std::to_string(rank) + " && echo $p; done)";
}

const std::string kShort = "--set train.max_steps=200 --set checkpoint.every_epochs=0 --set data.eval_split=none "
                           "--set train.log_every=20";

}  // namespace

TEST_CASE("the local cluster starts with two idle nodes and stop leaves no daemon", "[slurm]") {
  LocalCluster cluster;
  SKIP_WITHOUT(cluster);
  auto nodes = cluster.shell("sinfo -h -N -o '%N %t'");
  CHECK(nodes.out == "n1 idle\nn2 idle\n");
  auto hosts = cluster.shell("srun -N2 -l sh -c 'echo $SLURMD_NODENAME $(getent hosts $SLURMD_NODENAME)' | sort");
  CHECK(hosts.out == "0: n1 127.0.0.2 n1\n1: n2 127.0.0.3 n2\n");
  std::string pids = read_file(cluster.cluster_dir() + "/pids");
  CHECK(std::count(pids.begin(), pids.end(), '\n') == 4);  // munged, slurmctld, 2 × slurmd

  auto stop = cluster.stop();
  INFO(stop.err);
  CHECK(stop.exit_code == 0);
  // A directory it would wipe must be its own: a link is refused before anything starts.
  auto link = run_shell("ln -s /tmp " + cluster.file("link") + " && " + kScripts + "local_cluster.sh start " +
                        cluster.file("link"));
  CHECK(link.exit_code == 1);
  CHECK_THAT(link.err, Contains(cluster.file("link") + " is a symbolic link; give a directory of your own"));

  std::istringstream lines(pids);
  for (std::string pid; std::getline(lines, pid);) CHECK_FALSE(process_alive(std::stoi(pid)));
  // "[/]": the pattern must not match the shell that runs pgrep.
  CHECK(run_shell("pgrep -af '[/]" + cluster.cluster_dir().substr(1) + "'").out.empty());
}

TEST_CASE("sbatch mode A, srun mode B and a torchrun-style line train at world 4, bit-identical to launchers by hand",
          "[slurm]") {
  LocalCluster cluster;
  SKIP_WITHOUT(cluster);
  std::string reference = by_hand(cluster.file("hand"), "fashion_mnist_linear3.yaml", "");
  REQUIRE(!reference.empty());

  // Must-show 1: sbatch --wait, one ddprun per node.
  auto a = cluster.shell("sbatch --wait --nodes=2 --output=" + cluster.file("a.out") +
                         " --export=ALL,DDPRUN=" + bin("ddprun") + ",NPROC_PER_NODE=2 " + kScripts +
                         "train_multinode.sbatch " + config("fashion_mnist_linear3.yaml") +
                         " --set run.output_dir=" + cluster.file("a"));
  std::string a_out = read_file(cluster.file("a.out"));
  INFO(a.err << a_out);
  CHECK(a.exit_code == 0);
  CHECK_THAT(a_out, Contains("ddprun: Slurm job step: --nnodes 2 (SLURM_STEP_NUM_NODES), --node-rank 1 (SLURM_NODEID), "
                             "--master-addr n1 (first of SLURM_STEP_NODELIST)"));
  CHECK_THAT(a_out, Contains("[n1:rank 0]") && Contains("world size 4"));
  CHECK(same_bytes(reference, cluster.file("a/model.pt")));

  // Must-show 2: one Slurm task per rank, no launcher.
  auto b = cluster.shell("sbatch --wait --nodes=2 --ntasks-per-node=2 --output=" + cluster.file("b.out") +
                         " --export=ALL,DDP_TRAIN=" + bin("ddp-train") + " " + kScripts + "train_tasks.sbatch " +
                         config("fashion_mnist_linear3.yaml") + " --set run.output_dir=" + cluster.file("b"));
  std::string b_out = read_file(cluster.file("b.out"));
  INFO(b.err << b_out);
  CHECK(b.exit_code == 0);
  CHECK_THAT(b_out, Contains("0: ") && Contains("world size 4"));
  CHECK(same_bytes(reference, cluster.file("b/model.pt")));

  // Must-show 6: torchrun's line with ddprun in its place; node ranks by arrival.
  auto c = cluster.shell("srun -N2 --ntasks-per-node=1 " + bin("ddprun") +
                             " --nnodes 2 --nproc_per_node 2 --rdzv_id J --rdzv_backend c10d --rdzv_endpoint n1:" +
                             std::to_string(free_port()) + " " + config("fashion_mnist_linear3.yaml") +
                             " --set run.output_dir=" + cluster.file("c"));
  INFO(c.err);
  CHECK(c.exit_code == 0);
  CHECK_THAT(c.err, Contains("ddprun: node rank 0 of 2 (by arrival at n1:") && Contains("ddprun: node rank 1 of 2"));
  CHECK_THAT(c.err, !Contains("failed to bind"));  // the lost race to host the store is not an error
  CHECK(same_bytes(reference, cluster.file("c/model.pt")));
}

TEST_CASE("scancel --signal=TERM mid-run, then a requeue, ends bit-identical to an uninterrupted run, in both modes",
          "[slurm]") {
  LocalCluster cluster;
  SKIP_WITHOUT(cluster);
  // What is tested is Slurm's signal and requeue around a resume, not a model: the small MLP, its 200
  // steps slowed to 25 ms on rank 0 so that the signal lands mid-run, in a third of the ConvNet's time.
  const std::string sets = "--set train.epochs=13 " + kShort;
  std::string reference = by_hand(cluster.file("straight"), "synthetic_mlp.yaml", sets);
  REQUIRE(!reference.empty());

  struct Mode {
    std::string name, script, options, program;
  };
  for (const Mode& mode : {Mode{"A", "train_multinode.sbatch", "--nodes=2", "ddprun"},
                           Mode{"B", "train_tasks.sbatch", "--nodes=2 --ntasks-per-node=2", "ddp-train"}}) {
    std::string out = cluster.file("run" + mode.name), job_out = cluster.file("job" + mode.name + ".out");
    auto r = cluster.shell(
        kWaitJob + "job=$(sbatch --parsable " + mode.options + " --output=" + job_out +
        " --export=ALL,DDPRUN=" + bin("ddprun") + ",NPROC_PER_NODE=2,DDP_TRAIN=" + bin("ddp-train") +
        ",DDPRUN_TEST_STEP_DELAY=0:25 " + kScripts + mode.script + " " + config("synthetic_mlp.yaml") +
        " --set run.output_dir=" + out + " " + sets + ") || exit 1; " + until_logged(job_out, "step 20/200", 120) +
        "scancel --signal=TERM $job; echo first: $(wait_job $job); " +
        // Slurm holds a requeued job until the killed one's credential expires (AuthInfo cred_expire,
        // 10 s on the local cluster): starting it sooner fails with "Job credential revoked".
        "scontrol requeue $job; echo second: $(wait_job $job)");
    std::string log = read_file(job_out);
    auto daemons = run_shell("tail -n 15 " + cluster.cluster_dir() + "/log/*.log");
    INFO("mode " << mode.name << "\n" << r.out << r.err << log << "\nSlurm's logs:\n" << daemons.out);
    CHECK_THAT(r.out, Contains("first: JobState=FAILED Restarts=0 ExitCode=143:0"));
    CHECK_THAT(r.out, Contains("second: JobState=COMPLETED Restarts=1 ExitCode=0:0"));
    std::smatch match;
    REQUIRE(std::regex_search(log, match, std::regex("stopping at step ([0-9]+) as asked \\(SIGTERM\\)")));
    CHECK(std::stoi(match[1]) < 200);
    CHECK_THAT(log, Contains("(restart 1)") && Contains(mode.program + " exited with status 143") &&
                        Contains(mode.program + " exited with status 0") &&
                        Contains("resumed from " + out + "/checkpoints/step_"));
    CHECK(same_bytes(reference, out + "/model.pt"));
  }
}

TEST_CASE("a rank that fails on the second node fails the job, named with its host and exit code, leaving no worker",
          "[slurm]") {
  LocalCluster cluster;
  SKIP_WITHOUT(cluster);
  std::string out = cluster.file("run");
  auto r = cluster.shell(kWaitJob + "job=$(sbatch --parsable --nodes=2 --output=" + cluster.file("job.out") +
                         " --export=ALL,DDPRUN=" + bin("ddprun") + ",NPROC_PER_NODE=2 " + kScripts +
                         "train_multinode.sbatch " + config("fashion_mnist_convnet.yaml") +
                         " --set run.output_dir=" + out + " " + kShort + ") || exit 1; " +
                         until_logged(cluster.file("job.out"), "step 20/200", 120) + "pid=" + rank_pid(out, 3) +
                         "; echo killing rank 3: $pid; kill -KILL $pid; " + "echo job: $(wait_job $job); " +
                         until_true("! pgrep -f '[d]dp-train.*" + out + "' >/dev/null", 10) +
                         "echo left: $(pgrep -f '[d]dp-train.*" + out + "' | wc -l)");
  std::string log = read_file(cluster.file("job.out"));
  INFO(r.out << r.err << log);
  CHECK_THAT(r.out, Contains("job: JobState=FAILED Restarts=0 ExitCode=137:0"));
  CHECK_THAT(log, Contains("ddprun: rank 3 failed first: signal 9 (SIGKILL) (local rank 1 on n2, pid"));
  CHECK_THAT(log, Contains("ddprun: failed: rank 3 on n2: signal 9 (SIGKILL)"));  // said on node 0 too
  CHECK_THAT(log, Contains("ddprun exited with status 137"));
  CHECK_THAT(r.out, Contains("left: 0"));
}

TEST_CASE("with node names only Slurm knows, srun ddprun and srun ddp-train train, and a master nothing knows fails "
          "in seconds", "[slurm]") {
  LocalCluster cluster("unresolvable");
  SKIP_WITHOUT(cluster);
  auto names = cluster.shell("srun -N2 -l sh -c 'echo $SLURMD_NODENAME $(getent hosts $SLURMD_NODENAME || echo none)' "
                             "| sort");
  REQUIRE(names.out == "0: sn1 none\n1: sn2 none\n");  // NodeName=sn1 NodeAddr=127.0.0.2, in no hosts file
  const std::string train = config("synthetic_mlp.yaml") + " --set data.eval_split=none --set train.max_steps=20 "
                                                           "--set checkpoint.every_epochs=0 --set run.output_dir=";

  // Mode A: one launcher per node, the master derived from SLURM_STEP_NODELIST (sn1).
  auto a = cluster.shell("OMP_NUM_THREADS=1 srun -N2 --ntasks-per-node=1 " + bin("ddprun") + " --nproc-per-node 2 " +
                         train + cluster.file("a"));
  INFO(a.out << a.err);
  CHECK(a.exit_code == 0);
  CHECK_THAT(a.err, Contains("ddprun: the master sn1 does not resolve here (") &&
                        Contains("); Slurm's NodeAddr for it is 127.0.0.2 (scontrol show node sn1)"));
  CHECK_THAT(a.out, Contains("[sn1:rank 0]") && Contains("world size 4"));

  // Mode B: one Slurm task per rank, each reading SLURM_* itself.
  auto b = cluster.shell("OMP_NUM_THREADS=1 srun -N2 --ntasks-per-node=2 " + bin("ddp-train") + " " + train +
                         cluster.file("b"));
  INFO(b.out << b.err);
  CHECK(b.exit_code == 0);
  CHECK_THAT(b.out + b.err, Contains("world size 4") && Contains("Slurm's NodeAddr for it is 127.0.0.2"));
  CHECK(same_bytes(cluster.file("a/model.pt"), cluster.file("b/model.pt")));

  // A name neither the resolver nor Slurm knows fails at once (not after the 300 s rendezvous
  // time-out), naming the fix, in both modes.
  // The harness's limit (120 s) is well inside that time-out: a run that waited for it is stopped.
  auto unknown_a = cluster.shell("srun -N2 --ntasks-per-node=1 " + bin("ddprun") + " --master-addr sn9 -- true", 120);
  INFO(unknown_a.out << unknown_a.err);
  CHECK(unknown_a.exit_code != 0);
  CHECK_FALSE(unknown_a.timed_out);
  CHECK_THAT(unknown_a.err, Contains("ddprun: error: the master address sn9 does not resolve (") &&
                                Contains("and Slurm knows no NodeAddr for it): give node 0's address, one every node "
                                         "can resolve, with --master-addr (or MASTER_ADDR"));
  auto unknown_b = cluster.shell("MASTER_ADDR=sn9 srun -N2 --ntasks-per-node=1 " + bin("ddp-train") + " " + train +
                                 cluster.file("c"), 120);
  INFO(unknown_b.out << unknown_b.err);
  CHECK(unknown_b.exit_code != 0);
  CHECK_FALSE(unknown_b.timed_out);
  CHECK_THAT(unknown_b.err, Contains("error: the master address sn9 does not resolve (") &&
                                Contains("set MASTER_ADDR (or --master-addr) to an address of rank 0's node"));

  // Note [Slurm's batch step]: a batch script that starts ddprun or ddp-train itself, without srun,
  // runs once, on the first node; it fails at once, naming srun, rather than after the rendezvous
  // time-out (300 s) waiting for nodes or tasks nobody started.
  for (const auto& [name, layout, program] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"batch_a", "--nodes=2", bin("ddprun") + " --nproc-per-node 1 " + train},
           {"batch_b", "--nodes=1 --ntasks=2", bin("ddp-train") + " " + train},
           {"batch_c", "--nodes=2", bin("ddp-train") + " " + train}}) {  // no SLURM_NTASKS: trained alone
    auto batch = cluster.shell("sbatch --wait " + layout + " --output=" + cluster.file(name + ".out") + " --wrap '" +
                                   program + cluster.file(name) + "'; echo status=$?",
                               120);
    const std::string log = read_file(cluster.file(name + ".out"));
    INFO(name << ": " << batch.out << batch.err << log);
    CHECK_FALSE(batch.timed_out);
    CHECK_THAT(batch.out, Contains("status=2"));  // sbatch --wait exits with the job's status
    CHECK_THAT(log, Contains("but in no job step (no SLURM_STEP_ID: its batch script or an salloc shell)") &&
                        Contains(name == "batch_b" ? "while the job has 2 tasks" : "while the job has 2 nodes"));
  }
}

TEST_CASE("an elastic job under Slurm: a second job's srun on another node joins the first at its next round, and "
          "the result equals an uninterrupted world-2 run", "[slurm][elastic]") {
  LocalCluster cluster;
  SKIP_WITHOUT(cluster);
  // The same global batch at world 1 and 2 (Note [Global batch]), 2040 samples: whole steps at both.
  auto training = [](const std::string& out) {
    return config("synthetic_mlp.yaml") + " --set run.output_dir=" + out +
           " --set data.synthetic_train_samples=2040 --set train.epochs=6 --set train.global_batch_size=12"
           " --set train.batch_size=6 --set checkpoint.every_steps=50 --set checkpoint.every_epochs=0"
           " --set data.eval_split=none --set dist.shared_memory=false --set optim.lr=0.01 --set train.log_every=100"
           " --set model.hidden=[1024,1024]";  // slow enough (some ms a step) for the second job to join mid-run
  };
  auto reference = run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                                 training(cluster.file("ref")),
                             std::chrono::seconds(120));
  REQUIRE(reference.exit_code == 0);
  std::string out = cluster.file("run");
  // Rank 0 slowed by 15 ms a step: the second srun's start and join land mid-run on a loaded machine.
  std::string elastic = "env OMP_NUM_THREADS=1 DDPRUN_TEST_STEP_DELAY=0:15 " + bin("ddprun") + " --nnodes 1:2 --rdzv-backend c10d --rdzv-endpoint n1:" +
                        std::to_string(free_port()) + " --rdzv-id elastic-test --rdzv-settle 1 --node-timeout 3 --rdzv-timeout 30 " +
                        training(out);
  // Two jobs, one node each: the first starts alone (MIN 1), the second joins it mid-run.
  auto r = cluster.shell("srun -N1 -w n1 --output=" + cluster.file("first.out") + " " + elastic + " & F=$!; " +
                         until_true("[ -e " + out + "/checkpoints/step_0000000200.json ]", 120) +
                         "srun -N1 -w n2 --output=" + cluster.file("second.out") + " " + elastic +
                         "; S=$?; wait $F; echo statuses=$?,$S");
  std::string first = read_file(cluster.file("first.out")), second = read_file(cluster.file("second.out"));
  INFO(r.out << r.err << "\n--- first:\n" << first << "\n--- second:\n" << second);
  CHECK_THAT(r.out, Contains("statuses=0,0"));
  CHECK_THAT(first, Contains("rendezvous round 0: node rank 0 of 1 (n1), world size 1"));
  CHECK_THAT(first, Contains("round 0 ends: a node (n2) asks to join"));
  CHECK_THAT(first, Contains("rendezvous round 1: node rank 0 of 2 (n1, n2), world size 2"));
  CHECK_THAT(second, Contains("rendezvous round 1: node rank 1 of 2 (n1, n2), world size 2"));
  // Within 1e-5 of the reference (world 1 then 2 sums in another order than world 2 throughout).
  CHECK(run_shell("/usr/bin/python3 -c \"import torch,sys; a=torch.load(sys.argv[1]); b=torch.load(sys.argv[2]); "
                  "sys.exit(0 if all((a[k]-b[k]).abs().max() < 1e-5 for k in a) else 1)\" " +
                  cluster.file("ref/model.pt") + " " + out + "/model.pt")
            .exit_code == 0);
}
