// Elastic jobs (--nnodes MIN:MAX) with real launchers over loopback: a node lost, a node joining, a
// node drained with SIGTERM, a node that keeps failing and rejoining, and too few nodes.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <unistd.h>

#include "support/shared_run.h"
#include "support/subprocess.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kConfig = std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml";

// 2040 samples: whole global batches of 12 at world 2 and 3 alike, so every step is the same
// samples at either size (Note [Global batch]). 1020 steps, a checkpoint every 50.
std::string training(const std::string& out) {
  return kConfig + " --set run.output_dir=" + out +
         " --set data.synthetic_train_samples=2040 --set train.epochs=6 --set train.global_batch_size=12"
         " --set train.batch_size=4 --set checkpoint.every_steps=50 --set checkpoint.every_epochs=0"
         " --set checkpoint.keep_last=100 --set data.eval_split=none --set dist.shared_memory=false"
         " --set optim.lr=0.01 --set train.log_every=100";
}

// One node's launcher of a 2:3 job (or `nnodes`) at `port` of `host`, output to DIR/NODE.log (in the
// background: `&` follows). Nodes b and c start together, and the tests expect both in round 0: a
// settle of 5 s lets the later one in even when a loaded machine starts it seconds late (with 1 s,
// CI once saw c join in round 1). A round of all three closes at once, so only two-node rounds wait.
std::string node(const TempDir& dir, int port, const std::string& name, const std::string& what,
                 const std::string& extra = "", const std::string& host = "127.0.0.1",
                 const std::string& nnodes = "2:3") {
  return "OMP_NUM_THREADS=1 DDPRUN_RDZV_SECRET=s3cret TMPDIR=" + dir.file("tmp") + " " + bin("ddprun") +
         " --nnodes " + nnodes + " --rdzv-backend c10d --rdzv-endpoint " + host + ":" + std::to_string(port) +
         " --rdzv-settle 5 --node-timeout 3 --shutdown-grace 5 --rdzv-timeout 60 --local-addr node-" + name + " " +
         extra + " " + what + " > " + dir.file(name + ".log") + " 2>&1";
}

// Shell: SIGSTOP node a ($A, the store host) for 20 s, echoing "noticed while stopped after N ms"
// if `log` says within 10 s that the store host stopped answering.
std::string stop_store_host(const std::string& log) {
  return "kill -STOP $A; " + until_logged(log, "stopped answering", 10) + "grep -q 'stopped answering' " + log +
         " && echo noticed while stopped after $((i * 50)) "
         "ms; (sleep $((20 - i / 20)); kill -CONT $A) & ";
}

// Shell: wait (bounded) until a file exists.
std::string wait_for(const std::string& path) { return until_true("[ -e " + path + " ]"); }

// The uninterrupted run at world 3, one node: made once for every test here (Note [Shared runs]).
std::map<std::string, torch::Tensor> reference() {
  const std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 3 ";
  const std::string run = shared_run("elastic_reference", command + training("OUT") + "\n" + read_file(kConfig),
                                     [&](const std::string& out) {
                                       auto r = run_shell(command + training(out), std::chrono::seconds(120));
                                       INFO(r.out << r.err);
                                       REQUIRE(r.exit_code == 0);
                                     });
  return load_weights(run + "/model.pt");
}

double max_difference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& [name, tensor] : a)
    worst = std::max(worst, (tensor.to(torch::kDouble) - b.at(name).to(torch::kDouble)).abs().max().item<double>());
  return worst;
}

// Nothing of the job is left: no worker, no launcher, no store directory.
void check_nothing_left(const TempDir& dir, const std::string& out) {
  CHECK(run_shell("pgrep -f '[d]dp-train.*" + out + "'").out.empty());
  CHECK(run_shell("pgrep -f '[d]dprun.*" + dir.path() + "'").out.empty());
  for (const auto& entry : fs::directory_iterator(dir.file("tmp")))
    CHECK(entry.path().filename().string().rfind("ddprun-store-", 0) != 0);
}

// One test's job: its directory, the uninterrupted run's weights, and the shell that starts its nodes.
struct ElasticJob {
  TempDir dir;
  std::string out = dir.file("run");
  int port = free_port();
  std::map<std::string, torch::Tensor> expected;

  ElasticJob() {
    fs::create_directories(dir.file("tmp"));
    expected = reference();
  }
  // Shell: starts node `name` in the background, its pid in $`pid`. Rank 0 is slowed by 15 ms a step
  // (DDPRUN_TEST_STEP_DELAY), so that the 820 steps after step 200 last over 12 s: whatever a test
  // does to a node then (a join, SIGKILL, SIGSTOP, SIGTERM) is seen mid-run, not as the job ends. CI
  // saw both a join and a stopped store host, on a loaded machine, land in the job's last steps
  // (with 8 ms: a joiner's start, or noticing a stopped host, can take most of 6 s there).
  std::string start(const std::string& name, const std::string& pid, const std::string& extra = "") const {
    return "DDPRUN_TEST_STEP_DELAY=0:15 " + node(dir, port, name, training(out), extra) + " & " + pid + "=$!; ";
  }
  // Shell: nodes a (first: it hosts the store, so it is node 0 of every round), b and c, until step 200 is saved.
  std::string three_running() const {
    return start("a", "A") + until_accepts(port) + start("b", "B") + start("c", "C") +
           wait_for(out + "/checkpoints/step_0000000200.json");
  }
  std::string log(const std::string& name) const { return read_file(dir.file(name + ".log")); }
  double difference() const { return max_difference(load_weights(out + "/model.pt"), expected); }
  // The same command on nodes a and b, at a new endpoint, after the job stopped: it resumes and
  // ends as if never stopped.
  void resume_on_two_nodes() {
    port = free_port();
    auto again = run_shell(start("a", "A") + until_accepts(port) + start("b", "B") +
                               "wait $A; SA=$?; wait $B; echo statuses=$SA,$?",
                           std::chrono::seconds(240));
    const std::string a = log("a");
    INFO(again.out << again.err << "\n--- a, again:\n" << a);
    CHECK(count_lines(again.out, "statuses=0,0") == 1);
    CHECK_THAT(a, Contains("resumed from " + out + "/checkpoints/step_"));
    CHECK(difference() < 1e-5);
    check_nothing_left(dir, out);
  }
};

}  // namespace

TEST_CASE("elastic: a node's launcher SIGKILLed mid-run is noticed in seconds, named, and the other two finish "
          "with the uninterrupted run's weights", "[elastic][slow]") {
  ElasticJob job;
  auto r = run_shell(job.three_running() + "kill -KILL $C; wait $A; SA=$?; wait $B; echo statuses=$SA,$?",
                     std::chrono::seconds(240));
  std::string a = job.log("a"), b = job.log("b");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- b:\n" << b);
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  CHECK_THAT(a, Contains("rendezvous round 0: node rank 0 of 3"));
  // Named by its silent heartbeat (how long is a duration, which load moves: not checked).
  CHECK(std::regex_search(a, std::regex("round 0 ends: node [12] \\(node-c\\) was lost: its launcher sent no "
                                        "heartbeat for [0-9.]+ s")));
  CHECK_THAT(b, Contains("(node-c) was lost"));
  CHECK_THAT(a, Contains("membership change 1 (not counted against --max-restarts)"));
  CHECK_THAT(a, Contains("rendezvous round 1: node rank 0 of 2 (node-a, node-b), world size 2; failures so far 0"));
  CHECK_THAT(a, Contains("2 rank(s) × batch 3 × 2 micro-step(s) a step"));
  CHECK_THAT(a, Contains("written by 3 replicas of batch 4: the same 12 samples per step"));
  CHECK(job.difference() < 1e-5);
  check_nothing_left(job.dir, job.out);
}

TEST_CASE("elastic: node 0, which hosts the store, SIGKILLed mid-run: node 1 takes the store over, says so, and "
          "the job ends with the uninterrupted run's weights", "[elastic][slow]") {
  ElasticJob job;
  // Distinct loopback addresses: the new store is at node 1's --local-addr.
  auto r = run_shell(job.start("a", "A", "--local-addr 127.0.0.1") + until_accepts(job.port) +
                         job.start("b", "B", "--local-addr 127.0.0.2") + job.start("c", "C", "--local-addr 127.0.0.3") +
                         wait_for(job.out + "/checkpoints/step_0000000200.json") +
                         "kill -KILL $A; wait $B; SB=$?; wait $C; echo statuses=$SB,$?",
                     std::chrono::seconds(240));
  std::string b = job.log("b"), c = job.log("c");
  INFO(r.out << r.err << "\n--- b:\n" << b << "\n--- c:\n" << c);
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  std::smatch successor;
  REQUIRE(std::regex_search(b, successor, std::regex("node 1 \\((127\\.0\\.0\\.[23])\\) hosts a new one at")));
  std::string moved = "node 0 (127.0.0.1), which hosted the rendezvous store at 127.0.0.1:" + std::to_string(job.port) +
                      ", was lost; node 1 (" + std::string(successor[1]) + ") hosts a new one at " +
                      std::string(successor[1]) + ":" + std::to_string(job.port) + " from round 1";
  CHECK_THAT(b, Contains(moved));
  CHECK_THAT(c, Contains(moved));
  CHECK_THAT(b, Contains("rendezvous round 1: node rank"));
  CHECK_THAT(b + c, Contains("resumed from " + job.out + "/checkpoints/step_"));
  CHECK(job.difference() < 1e-5);
  check_nothing_left(job.dir, job.out);
}

TEST_CASE("elastic: node 0 lost just after a failure, before the next round forms: node 1's new store still "
          "counts that failure against --max-restarts", "[elastic][slow]") {
  TempDir dir;
  fs::create_directories(dir.file("tmp"));
  std::string failer = dir.file("failer.sh"), worker = dir.file("worker.sh");
  // Node a's worker fails in round 0; b's and c's wait there until they are stopped (however long
  // a holds its failure), and end well in round 1, saying the failure count their launcher gave them.
  run_shell("printf '#!/bin/sh\\nsleep 1; exit 3\\n' > " + failer +
            "; printf '#!/bin/sh\\necho failures before $DDPRUN_RESTART_COUNT; [ \"$DDPRUN_ROUND\" = 0 ] && exec sleep "
            "120; sleep 2\\n' > " + worker +
            "; chmod +x " + failer + " " + worker);
  int port = free_port();
  // --nnodes 2:4: a round of three waits --rdzv-settle (5 s) before it closes, and node a is killed
  // within it, once every node has said it restarts. Distinct loopback addresses: the new store is
  // at node 1's --local-addr.
  auto launcher = [&](const std::string& name, const std::string& script, const std::string& address) {
    return node(dir, port, name, "--no-python " + script,
                "--max-restarts 1 --rdzv-settle 5 --local-addr " + address, "127.0.0.1", "2:4");
  };
  std::string restarting = "restarting the workers in round 1 (restart 1 of 1)";
  auto r = run_shell(
      launcher("a", failer, "127.0.0.1") + " & A=$!; " + until_accepts(port) + launcher("b", worker, "127.0.0.2") +
          " & B=$!; " + launcher("c", worker, "127.0.0.3") + " & C=$!; " +
          until_logged(dir.file("a.log") + " " + dir.file("b.log") + " " + dir.file("c.log"), restarting, 60, 3) +
          "kill -KILL $A; wait $B; SB=$?; wait $C; echo statuses=$SB,$?",
      std::chrono::seconds(240));
  std::string b = read_file(dir.file("b.log")), c = read_file(dir.file("c.log"));
  INFO(r.out << r.err << "\n--- a:\n" << read_file(dir.file("a.log")) << "\n--- b:\n" << b << "\n--- c:\n" << c);
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  CHECK(std::regex_search(b + c, std::regex("node 1 \\(127\\.0\\.0\\.[23]\\) hosts a new one at 127\\.0\\.0\\.[23]:" +
                                           std::to_string(port) + " from round 1")));
  // Round 0's failure, reported to the store that was lost, is counted in the new one: without it,
  // the job would have one restart more than --max-restarts 1.
  for (const auto& log : {b, c}) {
    CHECK_THAT(log, Contains("rendezvous round 1: node rank") && Contains("world size 2; failures so far 1 "
                                                                        "(--max-restarts 1)"));
    CHECK_THAT(log, Contains("failures before 1"));
  }
  CHECK(run_shell("pgrep -f '" + dir.file("worker") + "[.]sh'").out.empty());
}

namespace {

// Three launchers a (node 0, at 127.0.0.1), b and c of a 2:3 job whose workers sleep, for the tests
// that take node 0 and node 1 away together. Node 1 is b or c, whichever arrived first.
struct SleepingNodes {
  TempDir dir;
  int port = free_port();
  std::string sleeper = dir.file("sleeper.sh");

  SleepingNodes() {
    fs::create_directories(dir.file("tmp"));
    run_shell("printf '#!/bin/sh\\nsleep 60\\n' > " + sleeper + "; chmod +x " + sleeper);
  }
  // Shell: the three in round 0, then $L is node 1's launcher and $S the other's (the survivor),
  // and "node1=b" or "node1=c" is echoed.
  std::string running(const std::string& extra) const {
    auto launcher = [&](const std::string& name, const std::string& address) {
      return node(dir, port, name, "--no-python " + sleeper, extra + " --local-addr " + address);
    };
    return launcher("a", "127.0.0.1") + " & A=$!; " + until_accepts(port) + launcher("b", "127.0.0.2") + " & B=$!; " +
           launcher("c", "127.0.0.3") + " & C=$!; " +
           until_logged(dir.file("b.log") + " " + dir.file("c.log"), "rendezvous round 0: node rank", 60, 2) +
           "sleep 1; if grep -q 'node rank 1 of 3' " + dir.file("b.log") +
           "; then L=$B; S=$C; echo node1=b; else "
           "L=$C; S=$B; echo node1=c; fi; ";
  }
  // "b" or "c", from what running() echoed.
  static std::string node_1(const std::string& out) {
    std::smatch found;
    REQUIRE(std::regex_search(out, found, std::regex("node1=([bc])")));
    return found[1];
  }
  std::string log(const std::string& name) const { return read_file(dir.file(name + ".log")); }
  // Node 2, the one of b and c that is not node 1: its log, and node 1's address.
  struct Survivor {
    std::string log, node_1_address;
  };
  Survivor survivor(const std::string& out) const {
    const bool b_is_node_1 = node_1(out) == "b";
    return {log(b_is_node_1 ? "c" : "b"), b_is_node_1 ? "127.0.0.2" : "127.0.0.3"};
  }
  bool sleepers_left() const { return !run_shell("pgrep -f '" + dir.file("sleeper") + "[.]sh'").out.empty(); }
};

}  // namespace

TEST_CASE("elastic: node 0 and node 1 both SIGKILLed: node 2 says node 1, which would host the new store, did "
          "not, and ends with exit 2 well before --rdzv-timeout, without c10d's log lines", "[elastic][slow]") {
  SleepingNodes job;
  // --rdzv-timeout 200 outlasts the shell's 150 s: a node that waited it out would end no line here.
  auto r = run_shell(job.running("--shutdown-grace 2 --rdzv-timeout 200") + "kill -KILL $A $L; wait $S; echo status=$?",
                     std::chrono::seconds(150));
  const auto [log, node_1_address] = job.survivor(r.out);
  INFO(r.out << r.err << "\n--- survivor:\n" << log);
  CHECK(count_lines(r.out, "status=2") == 1);
  const std::string store = "127.0.0.1:" + std::to_string(job.port);
  CHECK_THAT(log, Contains("node 0 (127.0.0.1), which hosted the rendezvous store at " + store + ", was lost, and "
                           "node 1 (" + node_1_address + "), which would host a new one, did not (lost or gone too): "
                           "nothing accepted at " + node_1_address + ":" + std::to_string(job.port) + " within 20 s "
                           "(twice --node-timeout and --shutdown-grace, and 10 s)"));
  CHECK(count_lines(log, "ddprun: error: lost the rendezvous store at " + store + ", hosted by node 0's launcher on "
                         "127.0.0.1: the job cannot go on without it; the same command resumes it from its last "
                         "checkpoint") == 1);
  CHECK_THAT(log, !Contains("c10d") && !Contains("InitGoogleLogging"));
  CHECK_FALSE(job.sleepers_left());
}

TEST_CASE("elastic: SIGTERM to node 2 while it waits for node 1's new store: it leaves then, saying so, with exit "
          "143", "[elastic][slow]") {
  SleepingNodes job;
  // The wait's bound, 2 × (100 + 2) + 10 s capped at --rdzv-timeout 200, outlasts the shell's 150 s:
  // a node that waited it out would end no line here.
  const std::string logs = job.dir.file("b.log") + " " + job.dir.file("c.log");
  auto r = run_shell(job.running("--node-timeout 100 --shutdown-grace 2 --rdzv-timeout 200") + "kill -KILL $A $L; " +
                         until_logged(logs, "waiting up to") + "kill -TERM $S; wait $S; echo status=$?",
                     std::chrono::seconds(150));
  const auto [log, node_1_address] = job.survivor(r.out);
  INFO(r.out << r.err << "\n--- survivor:\n" << log);
  CHECK(count_lines(r.out, "status=143") == 1);
  CHECK_THAT(log, Contains("node 0 (127.0.0.1), which hosted the rendezvous store at 127.0.0.1:" +
                           std::to_string(job.port) + ", was lost; waiting up to 200 s for node 1 (" + node_1_address +
                           ") to host a new one at " + node_1_address + ":" + std::to_string(job.port)));
  CHECK(count_lines(log, "ddprun: received SIGTERM while waiting for node 1 to host a new rendezvous store; leaving "
                         "the job") == 1);
  CHECK_THAT(log, !Contains("did not (lost or gone too)") && !Contains("error:"));
  CHECK_FALSE(job.sleepers_left());
}

TEST_CASE("elastic: SIGTERM to node 0 and node 1 together: the later to look says the other node cannot go on, and "
          "it ends with exit 2 once node 1's new store does not come", "[elastic][slow]") {
  SleepingNodes job;
  auto r = run_shell(job.running("--shutdown-grace 2") + "kill -TERM $A $L; wait $A; SA=$?; wait $L; SL=$?; wait $S; "
                     "echo statuses=$SA,$SL,$?",
                     std::chrono::seconds(150));
  const std::string node_1 = SleepingNodes::node_1(r.out);
  const std::string a = job.log("a"), leaver = job.log(node_1), survivor = job.log(node_1 == "b" ? "c" : "b");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- node 1:\n" << leaver << "\n--- survivor:\n" << survivor);
  CHECK(count_lines(r.out, "statuses=143,143,2") == 1);
  // Each marks its leave as its signal comes, before it looks: the later to look sees both marks.
  // The earlier may have looked before the other's signal was taken (seconds apart under load).
  const std::string both = "left the job (interrupted by SIGTERM); node 0, whose store the job meets in, and node 1, "
                           "which would host the next, both leave, so the other 1 node(s) cannot go on: the same "
                           "command resumes it from its last checkpoint";
  CHECK((count_occurrences(a, both) + count_occurrences(leaver, both)) >= 1);
  for (const auto& log : {a, leaver}) CHECK_THAT(log, Contains("left the job (interrupted by SIGTERM)"));
  CHECK_THAT(survivor, Contains("which would host a new one, did not (lost or gone too)"));
  CHECK_FALSE(job.sleepers_left());
}

TEST_CASE("elastic: node 0, which hosts the store, SIGSTOPped for 20 s: the others say it stopped answering while "
          "it is stopped and end with one line each, node 0 leaves once it runs again, and the same command resumes "
          "to the uninterrupted run's weights",
          "[elastic][slow]") {
  ElasticJob job;
  // A frozen host keeps its connections open: only a call that gets no reply can tell. On one
  // machine, node 1 cannot take the store over: the stopped store listens on every address, its
  // port too (nodes on machines of their own take over as after a SIGKILL).
  auto r = run_shell(job.start("a", "A", "--local-addr 127.0.0.1") + until_accepts(job.port) +
                         job.start("b", "B", "--local-addr 127.0.0.2") + job.start("c", "C", "--local-addr 127.0.0.3") +
                         wait_for(job.out + "/checkpoints/step_0000000200.json") + stop_store_host(job.dir.file("b.log")) +
                         "wait $B; SB=$?; wait $C; SC=$?; wait $A; echo statuses=$?,$SB,$SC",
                     std::chrono::seconds(240));
  std::string a = job.log("a"), b = job.log("b"), c = job.log("c");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- b:\n" << b << "\n--- c:\n" << c);
  CHECK_THAT(r.out, Contains("noticed while stopped after"));
  CHECK(count_lines(r.out, "statuses=1,2,2") == 1);
  const std::string store = "127.0.0.1:" + std::to_string(job.port);
  const std::string lost = "lost the rendezvous store at " + store + ", hosted by node 0's launcher on 127.0.0.1: the "
                           "store host stopped answering (no reply in 3 s)";
  CHECK_THAT(b, Contains("round 0 ends: " + lost));
  CHECK_THAT(c, Contains("round 0 ends: " + lost));
  CHECK_THAT(b + c, Contains(") cannot host a new one at port " + std::to_string(job.port) +
                             ": it is in use on this machine (by the stopped store host, if it runs here)"));
  for (const auto& node : {b, c})
    CHECK_THAT(node, Contains("ddprun: error: " + lost + ": the job cannot go on without it; the same command resumes "
                              "it from its last checkpoint"));
  CHECK_THAT(b + c, !Contains("Address already in use"));  // no word from c10d's bind
  CHECK_THAT(a, Contains("ddprun: this launcher did not run for ") &&
                    Contains(" s (stopped or frozen; over twice --node-timeout 3 s), so the other nodes have gone on "
                             "without it"));
  // Its workers stop with the others' reason (the round ended), and say how the job resumes.
  CHECK_THAT(a, Contains("checkpoint saved, ") && Contains("the same command resumes from it"));
  job.resume_on_two_nodes();
}

namespace {

// Three machines on one: network namespaces joined by a bridge in a fourth, 10.77.0.1 to .3 on an
// interface "ddp0" each, so that a stopped store host holds its port on its own machine only (root
// only; the test says why it skips).
class Machines {
 public:
  Machines() : tag_("ddpm" + std::to_string(getpid())) {
    // Those of an earlier test that was killed (its process gone) go first: its names may come again.
    run_shell("for ns in $(ip netns list 2>/dev/null | grep -o '^ddpm[0-9]*-[a-z0-9]*'); do pid=${ns#ddpm}; "
              "kill -0 ${pid%%-*} 2>/dev/null || ip netns del $ns; done");
    auto made = run_shell("ip netns add " + tag_ + "-bridge");
    if (made.exit_code != 0) {  // not root, or no network namespaces in this container
      why_not_ = made.err.empty() ? "ip netns add: exit " + std::to_string(made.exit_code) : made.err;
      return;
    }
    std::string setup = "set -e; ip -n " + tag_ + "-bridge link add br0 type bridge; ip -n " + tag_ +
                        "-bridge link set br0 up; ";
    for (int i = 0; i < 3; ++i) {
      std::string ns = name(i), port = "p" + std::to_string(i);
      setup += "ip netns add " + ns + "; ip link add ddp0 netns " + ns + " type veth peer name " + port + " netns " +
               tag_ + "-bridge; ip -n " + tag_ + "-bridge link set " + port + " master br0 up; ip -n " + ns +
               " addr add " + address(i) + "/24 dev ddp0; ip -n " + ns + " link set ddp0 up; ip -n " + ns +
               " link set lo up; ";
    }
    setup_ = run_shell(setup);  // namespaces can be made here: a failure now is the test's
  }
  ~Machines() {
    try {
      run_shell("for ns in " + name(0) + " " + name(1) + " " + name(2) + " " + tag_ + "-bridge; do ip netns del $ns; "
                "done 2>/dev/null");
    } catch (...) {
    }
  }
  const std::string& why_not() const { return why_not_; }
  const CommandResult& setup() const { return setup_; }
  std::string address(int i) const { return "10.77.0." + std::to_string(i + 1); }
  // A command prefix that runs on machine i, its workers' data on its own interface.
  std::string on(int i) const { return "ip netns exec " + name(i) + " env GLOO_SOCKET_IFNAME=ddp0 "; }

 private:
  std::string name(int i) const { return tag_ + "-" + std::to_string(i); }
  std::string tag_, why_not_;
  CommandResult setup_;
};

}  // namespace

TEST_CASE("elastic: node 0, which hosts the store, SIGSTOPped for 20 s on a machine of its own: the others say it "
          "stopped answering while it is stopped, node 1 takes the store over, and the job ends with the "
          "uninterrupted run's weights", "[elastic][slow]") {
  Machines machines;
  if (!machines.why_not().empty()) {
    WARN("skipped: cannot make network namespaces here (needs root and ip netns): " << machines.why_not());
    return;
  }
  INFO(machines.setup().out << machines.setup().err);
  REQUIRE(machines.setup().exit_code == 0);
  ElasticJob job;
  std::string endpoint = machines.address(0) + ":" + std::to_string(job.port);
  auto launcher = [&](int i, const std::string& name, const std::string& pid) {
    return machines.on(i) + node(job.dir, job.port, name, training(job.out), "--local-addr " + machines.address(i),
                                 machines.address(0)) + " & " + pid + "=$!; ";
  };
  auto r = run_shell(launcher(0, "a", "A") + "sleep 1.5; " + launcher(1, "b", "B") + launcher(2, "c", "C") +
                         wait_for(job.out + "/checkpoints/step_0000000200.json") + stop_store_host(job.dir.file("b.log")) +
                         "wait $B; SB=$?; wait $C; SC=$?; wait $A; echo statuses=$?,$SB,$SC",
                     std::chrono::seconds(240));
  std::string a = job.log("a"), b = job.log("b"), c = job.log("c");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- b:\n" << b << "\n--- c:\n" << c);
  CHECK_THAT(r.out, Contains("noticed while stopped after"));  // within 10 s
  CHECK(count_lines(r.out, "statuses=1,0,0") == 1);
  const std::string lost = "lost the rendezvous store at " + endpoint + ", hosted by node 0's launcher on " +
                           machines.address(0) + ": the store host stopped answering (no reply in 3 s)";
  CHECK_THAT(b, Contains("round 0 ends: " + lost));
  // Node 1 is b or c, whichever arrived first: it hosts the new store on its own machine.
  CHECK(std::regex_search(b + c, std::regex("node 1 \\((10\\.77\\.0\\.[23])\\) hosts a new one at "
                                           "\\1:" + std::to_string(job.port) + " from round 1")));
  CHECK_THAT(b + c, Contains("rendezvous round 1: node rank 0 of 2"));
  CHECK_THAT(a, Contains("ddprun: this launcher did not run for ") &&
                    Contains("so the other nodes have gone on without it"));
  CHECK(job.difference() < 1e-5);
  check_nothing_left(job.dir, job.out);
}

TEST_CASE("elastic: a node that joins a running 2-node job is admitted at the next round, and the job ends with "
          "the uninterrupted run's weights", "[elastic][slow]") {
  ElasticJob job;
  auto r = run_shell(job.start("a", "A") + until_accepts(job.port) + job.start("b", "B") +
                         wait_for(job.out + "/checkpoints/step_0000000200.json") + job.start("c", "C") +
                         "wait $A; SA=$?; wait $B; SB=$?; wait $C; echo statuses=$SA,$SB,$?",
                     std::chrono::seconds(240));
  std::string a = job.log("a"), c = job.log("c");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- c:\n" << c);
  CHECK(count_lines(r.out, "statuses=0,0,0") == 1);
  CHECK_THAT(a, Contains("rendezvous round 0: node rank 0 of 2 (node-a, node-b), world size 2"));
  CHECK_THAT(a, Contains("round 0 ends: a node (node-c) asks to join; room for 1 more (--nnodes 2:3)"));
  CHECK_THAT(a, Contains("rendezvous round 1: node rank 0 of 3 (node-a, node-b, node-c), world size 3"));
  CHECK_THAT(c, Contains("joining a running elastic job: admitted when its round 1 forms"));
  CHECK_THAT(c, Contains("rendezvous round 1: node rank 2 of 3"));
  // The job's count, which the node that just joined knows too.
  CHECK_THAT(a, Contains("world size 3; failures so far 0 (--max-restarts 0), membership changes 1"));
  CHECK_THAT(c, Contains("world size 3; failures so far 0 (--max-restarts 0), membership changes 1"));
  CHECK_THAT(a, Contains("written by 2 replicas of batch 3 × 2 micro-steps: the same 12 samples per step"));
  CHECK_THAT(a, Contains("the job's nodes changed, and the launcher ends this round") && !Contains(" as asked ("));
  CHECK(job.difference() < 1e-5);
  check_nothing_left(job.dir, job.out);
}

TEST_CASE("elastic: a node that joins with another config, or with workers that would split the global batch "
          "unevenly, is refused alone, and the job goes on as if it had not come", "[elastic][slow]") {
  ElasticJob job;
  // Node c: another optim.lr. Node d, once c is gone: 3 workers, a world of 5 that cannot share
  // train.global_batch_size 12.
  auto r = run_shell(job.start("a", "A") + until_accepts(job.port) + job.start("b", "B") +
                         wait_for(job.out + "/checkpoints/step_0000000200.json") +
                         node(job.dir, job.port, "c", training(job.out) + " --set optim.lr=0.5") + " & C=$!; " +
                         "wait $C; SC=$?; " + job.start("d", "D", "--nproc-per-node 3") +
                         "wait $D; SD=$?; wait $A; SA=$?; wait $B; SB=$?; echo statuses=$SA,$SB,$SC,$SD",
                     std::chrono::seconds(240));
  std::string a = job.log("a"), b = job.log("b"), c = job.log("c"), d = job.log("d");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- c:\n" << c << "\n--- d:\n" << d);
  CHECK(count_lines(r.out, "statuses=0,0,2,2") == 1);
  CHECK_THAT(c, Contains("rank 2's config differs from rank 0's: optim.lr 0.5 (rank 0: 0.01)"));
  CHECK_THAT(c, Contains("ddprun: refused by the running job, which goes on without this node: "));
  CHECK_THAT(d, Contains("train.global_batch_size: 12 samples do not split evenly over 5 ranks"));
  CHECK_THAT(d, Contains("ddprun: refused by the running job, which goes on without this node: "));
  for (const auto& veteran : {a, b}) {
    CHECK_THAT(veteran, Contains("(not counted against --max-restarts): the node(s) that joined in round 1 (node-c) "
                                 "were refused, as their workers could not start with the job's ("));
    CHECK_THAT(veteran, Contains("(node-d) were refused, as their workers could not start with the job's ("));
    CHECK_THAT(veteran, Contains("rendezvous round 2: node rank") && Contains("of 2 (node-a, node-b), world size 2; "
                                                                              "failures so far 0"));
  }
  CHECK(job.difference() < 1e-5);
  check_nothing_left(job.dir, job.out);
}

TEST_CASE("elastic: SIGTERM to one node's launcher: it checkpoints, says it leaves, exits 143, and the others "
          "go on to the same weights, and two nodes on one host are told apart by their launchers' pids",
          "[elastic][slow]") {
  ElasticJob job;
  // Nodes b and c share a host (c's --local-addr is b's): named by host alone, they would read alike.
  auto r = run_shell(job.start("a", "A") + until_accepts(job.port) + job.start("b", "B") + job.start("c", "C", "--local-addr node-b") +
                         wait_for(job.out + "/checkpoints/step_0000000200.json") + "echo pids=$B,$C; " +
                         "kill -TERM $C; wait $C; SC=$?; wait $A; SA=$?; wait $B; echo statuses=$SA,$?,$SC",
                     std::chrono::seconds(240));
  std::string a = job.log("a"), c = job.log("c");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- c:\n" << c);
  CHECK(count_lines(r.out, "statuses=0,0,143") == 1);
  CHECK_THAT(c, Contains("received SIGTERM: this node leaves the job"));
  CHECK_THAT(c, Contains("left the job (interrupted by SIGTERM); the other 2 node(s) go on without this one"));
  std::smatch pids;
  REQUIRE(std::regex_search(r.out, pids, std::regex("pids=([0-9]+),([0-9]+)")));
  // b and c start together, so either may arrive first and take node rank 1.
  auto pair = [](const std::string& x, const std::string& y) {
    return "rendezvous round 0: node rank 0 of 3 (node-a, pid " + x + " on node-b, pid " + y + " on node-b)";
  };
  CHECK_THAT(a, Contains(pair(pids[1], pids[2])) || Contains(pair(pids[2], pids[1])));
  CHECK_THAT(a, Contains("(pid " + std::string(pids[2]) + " on node-b) is leaving: received SIGTERM"));
  CHECK_THAT(a, Contains("rendezvous round 1: node rank 0 of 2 (node-a, node-b)"));
  // The workers stopped together at one step and saved it: round 1 starts there.
  std::smatch stopped;
  // Nobody signalled node a: its rank 0 stopped with node c's ranks, or when its launcher ended
  // the round, and says so (not "as asked").
  REQUIRE(std::regex_search(a, stopped, std::regex("stopping at step ([0-9]+): (another rank was asked to stop|the "
                                                   "job's nodes changed, and the launcher ends this round)")));
  CHECK_THAT(a, !Contains(" as asked ("));
  CHECK_THAT(a, Contains("resumed from " + job.out + "/checkpoints/step_"));
  CHECK_THAT(a, Contains("at step " + std::string(stopped[1]) + " "));
  CHECK(job.difference() < 1e-5);
  check_nothing_left(job.dir, job.out);
}

TEST_CASE("elastic: SIGTERM to every node at once (scancel): the last to look says the job stops here, each exits "
          "143, and the same command resumes to the uninterrupted run's weights", "[elastic][slow]") {
  ElasticJob job;
  auto r = run_shell(job.three_running() + "kill -TERM $A $B $C; wait $A; SA=$?; wait $B; SB=$?; wait $C; "
                     "echo statuses=$SA,$SB,$?",
                     std::chrono::seconds(240));
  std::string a = job.log("a"), b = job.log("b"), c = job.log("c");
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- b:\n" << b << "\n--- c:\n" << c);
  CHECK(count_lines(r.out, "statuses=143,143,143") == 1);
  // The last to look sees every mark (each marks as its signal comes, before it looks); the others
  // look 2 s on, which a loaded machine may take to deliver the last signal.
  const std::string all = "left the job (interrupted by SIGTERM), as every other node of the round did: the job "
                          "stops here, and the same command resumes it from its last checkpoint";
  CHECK((count_occurrences(a, all) + count_occurrences(b, all) + count_occurrences(c, all)) >= 1);
  for (const auto& log : {a, b, c}) CHECK_THAT(log, Contains("left the job (interrupted by SIGTERM)"));
  CHECK_THAT(a, Contains("checkpoint saved, ") && Contains("the same command resumes from it"));
  job.resume_on_two_nodes();
}

TEST_CASE("elastic: a node that fails and rejoins in a loop cannot take the job past --max-restarts, and membership "
          "changes are counted apart", "[elastic][slow]") {
  TempDir dir;
  fs::create_directories(dir.file("tmp"));
  std::string sleeper = dir.file("sleeper.sh"), failer = dir.file("failer.sh");
  run_shell("printf '#!/bin/sh\\nsleep 60\\n' > " + sleeper + "; printf '#!/bin/sh\\nsleep 1; exit 3\\n' > " + failer +
            "; chmod +x " + sleeper + " " + failer);
  int port = free_port();
  // node-c's launcher gives up at its first failure and is started again at once, three times.
  std::string c_loop = "for i in 1 2 3; do " + node(dir, port, "c" + std::string("$i"), "--no-python " + failer,
                                                  "--max-restarts 0") + "; done";
  auto r = run_shell(node(dir, port, "a", "--no-python " + sleeper, "--max-restarts 1") + " & A=$!; " + until_accepts(port) +
                         node(dir, port, "b", "--no-python " + sleeper, "--max-restarts 1") + " & B=$!; (" + c_loop +
                         ") & L=$!; wait $A; SA=$?; wait $B; SB=$?; kill $L 2>/dev/null; wait; echo statuses=$SA,$SB",
                     std::chrono::seconds(240));
  std::string a = read_file(dir.file("a.log"));
  INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- c1:\n" << read_file(dir.file("c1.log")));
  CHECK(count_lines(r.out, "statuses=3,3") == 1);  // the failure's exit code, after the restart ran out
  CHECK_THAT(a, Contains("exit code 3"));
  CHECK_THAT(a, Contains("restarting the workers in round"));
  CHECK_THAT(a, Contains("(restart 1 of 1)"));
  CHECK_THAT(a, Contains("failures so far 1 (--max-restarts 1)"));
  CHECK_THAT(a, Contains("giving up after 1 restart(s) for failures"));
  CHECK_THAT(a, Contains("rendezvous round 1: "));
  CHECK(run_shell("pgrep -f '" + dir.file("sleeper") + "[.]sh'").out.empty());  // its own: others run beside
}

TEST_CASE("elastic: below MIN nodes the job waits --rdzv-timeout, then says how many it had and needed",
          "[elastic]") {
  TempDir dir;
  int port = free_port();
  auto r = run_shell(bin("ddprun") + " --nnodes 2:3 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
                         std::to_string(port) + " --rdzv-timeout 3 --no-python true",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  std::string message = "rendezvous round 0 had 1 node(s) after --rdzv-timeout 3 s, and --nnodes 2:3 needs at least 2";
  CHECK(count_lines(r.err, "ddprun: error: " + message) == 1);
}

}  // namespace DDP_TEST_FILE
