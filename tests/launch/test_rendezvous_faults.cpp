// The rendezvous under faults (issue 22): a launcher of another job on the same endpoint, nodes
// with different secrets, a node 0 that gives up, a service that is not a store on the port. Real
// launchers over loopback; each fault must end in one line that names its cause, in seconds.
#include <catch2/catch.hpp>

#include "ddp/launch/machine.h"
#include "support/leftovers.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

std::string ddprun() { return bin("ddprun"); }

// A Python listener on 127.0.0.1:argv[1] that creates the file argv[2] once it listens, then runs
// `serve` with the listening socket `s`; written to DIR/name, whose path it returns.
std::string listener(const TempDir& dir, const std::string& name, const std::string& serve) {
  write_file(dir.file(name),
             "import socket, sys\n"
             "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
             "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(16); open(sys.argv[2], 'w').close()\n" +
                 serve);
  return dir.file(name);
}

// `listener_command` (which creates `up` once it listens on `port`) in the background, then ddprun
// as node 1 of 2 against that port; prints status=N and stops the listener.
CommandResult node_against(const std::string& listener_command, const std::string& up, const std::string& port,
                           int rdzv_timeout_s) {
  return run_shell(listener_command + " & S=$!; while [ ! -e " + up + " ]; do sleep 0.05; done; " + ddprun() +
                       " --nnodes 2 --node-rank 1 --master-port " + port + " --rdzv-timeout " +
                       std::to_string(rdzv_timeout_s) + " -- true; echo status=$?; kill $S 2>/dev/null; wait $S",
                   std::chrono::seconds(60));
}

}  // namespace

TEST_CASE("a launcher with another --rdzv-id is refused before it takes a node rank, and the job runs on",
          "[launch][rendezvous]") {
  // Job J's node 0, then a launcher of job K on the same endpoint, then J's real second node.
  TempDir dir;
  const int port = free_port();
  std::string endpoint = "127.0.0.1:" + std::to_string(port);
  auto line = [&](const std::string& id) {
    return ddprun() + " --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint " + endpoint +
           " --rdzv-id " + id + " --rdzv-timeout 20 -- sh -c 'echo rank=$RANK run=$DDPRUN_RUN_ID'";
  };
  auto r = run_shell(line("J") + " & A=$!; " + until_accepts(port) + line("K") + "; echo intruder=$?; " + line("J") +
                         "; b=$?; wait $A; echo job=$?,$b",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "intruder=2") == 1);
  CHECK(count_lines(r.out, "job=0,0") == 1);
  CHECK_THAT(r.err, Contains("run id K (--run-id/--rdzv-id) differs from J, the run id of the job whose node 0 hosts "
                             "the rendezvous at " + endpoint + ": another job uses this endpoint"));
  CHECK_THAT(r.err, !Contains("are taken"));
  std::string host = ddp::host_name();
  CHECK(count_lines(r.out, "[" + host + ":rank 0] rank=0 run=J") == 1);
  CHECK(count_lines(r.out, "[" + host + ":rank 1] rank=1 run=J") == 1);
}

TEST_CASE("nodes with different rendezvous secrets are refused at the rendezvous, on both nodes",
          "[launch][rendezvous][hmac]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  // A node that waited out --rdzv-timeout instead of being refused would meet the harness's limit first.
  std::string common = " --nnodes 2 --nproc-per-node 1 --master-port " + port + " --rdzv-timeout 300 -- sh -c "
                       "'echo ran; sleep 3'";
  for (std::string second : {"DDPRUN_RDZV_SECRET=other", "env -u DDPRUN_RDZV_SECRET"}) {
    auto r = run_shell(second + " " + ddprun() + " --node-rank 1" + common + " 2>" + dir.file("b.err") + " & B=$!; " +
                           "DDPRUN_RDZV_SECRET=s3cret " + ddprun() + " --node-rank 0" + common + " 2>" +
                           dir.file("a.err") + "; a=$?; wait $B; echo statuses=$a,$?",
                       std::chrono::seconds(60));
    std::string a = read_file(dir.file("a.err")), b = read_file(dir.file("b.err"));
    INFO(second << "\n" << r.out << "\nnode 0:\n" << a << "node 1:\n" << b);
    CHECK(count_lines(r.out, "statuses=2,2") == 1);
    CHECK_THAT(r.out, !Contains("ran"));  // no worker started
    CHECK_THAT(a, Contains("ddprun: error: node(s) 1 (") && Contains("have a different rendezvous secret than this "
                                                                       "node (node 0): set the same DDPRUN_RDZV_SECRET"));
    CHECK_THAT(b, Contains("ddprun: error: node(s) 0 (") && Contains("have a different rendezvous secret than this "
                                                                       "node (node 1"));
    CHECK_THAT(a + b, !Contains("written from outside") && !Contains("Broken pipe") && !Contains("internal error"));
  }
}

TEST_CASE("nodes started with different --nnodes are refused at the rendezvous, each naming the other's count",
          "[launch][rendezvous]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  // The node that counted 3 waited for node 2 until the other gave up, and then said only that node
  // 0 went away, or timed out waiting for node 2.
  std::string common = " --nproc-per-node 1 --master-port " + port + " --rdzv-timeout 300 -- sh -c 'echo ran'";
  for (const auto& [count_0, count_1] : {std::pair{2, 3}, std::pair{3, 2}})
    for (const bool node_1_first : {true, false}) {
      const std::string node_1 =
          ddprun() + " --nnodes " + std::to_string(count_1) + " --node-rank 1" + common + " 2>" + dir.file("b.err");
      const std::string node_0 =
          ddprun() + " --nnodes " + std::to_string(count_0) + " --node-rank 0" + common + " 2>" + dir.file("a.err");
      auto r =
          run_shell(node_1_first ? node_1 + " & B=$!; sleep 0.5; " + node_0 + "; a=$?; wait $B; echo statuses=$a,$?"
                                 : node_0 + " & A=$!; sleep 0.5; " + node_1 + "; b=$?; wait $A; echo statuses=$?,$b",
                    std::chrono::seconds(60));
      std::string a = read_file(dir.file("a.err")), b = read_file(dir.file("b.err"));
      INFO("--nnodes " << count_0 << " and " << count_1 << ", node 1 first: " << node_1_first << "\n"
                       << r.out << "\nnode 0:\n"
                       << a << "node 1:\n"
                       << b);
      CHECK(count_lines(r.out, "statuses=2,2") == 1);
      CHECK_THAT(r.out, !Contains("ran"));
      CHECK_THAT(a, Contains("ddprun: error: node 1 (") &&
                        Contains(") was started with --nnodes " + std::to_string(count_1) +
                                 " but this node with --nnodes " + std::to_string(count_0)));
      CHECK_THAT(b, Contains("ddprun: error: node 0 (") &&
                        Contains(") was started with --nnodes " + std::to_string(count_0) +
                                 " but this node with --nnodes " + std::to_string(count_1)));
    }
}

TEST_CASE("elastic: a node whose workers finish first is done, not lost: the others' workers run to their end and "
          "every launcher exits 0, whichever node finishes first",
          "[launch][rendezvous][elastic]") {
  // torchrun's exit barrier: a launcher that finished said so, and its silence is no scale-down.
  TempDir dir;
  for (bool host_first : {false, true}) {
    const int port = free_port();
    std::string endpoint = "127.0.0.1:" + std::to_string(port);
    auto line = [&](const std::string& name, int seconds) {
      return ddprun() + " --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint " + endpoint +
             " --rdzv-id done --rdzv-timeout 30 --rdzv-settle 1 --node-timeout 5 --local-addr " + name +
             " -- sh -c 'sleep " + std::to_string(seconds) + "; echo finished-" + name + "' 2>" +
             dir.file(name + ".err");
    };
    // The first launcher hosts the store (node 0); the other's workers end 8 s apart from its own.
    const int a = host_first ? 2 : 10, b = host_first ? 10 : 2;
    auto r = run_shell(line("a", a) + " & A=$!; " + until_accepts(port) + line("b", b) + "; b=$?; wait $A; echo statuses=$?,$b",
                       std::chrono::seconds(90));
    const std::string errors = read_file(dir.file("a.err")) + read_file(dir.file("b.err"));
    INFO((host_first ? "node 0 finishes first\n" : "node 1 finishes first\n") << r.out << errors);
    CHECK(count_lines(r.out, "statuses=0,0") == 1);
    CHECK_THAT(r.out, Contains("finished-a") && Contains("finished-b"));
    CHECK_THAT(errors, !Contains("was lost") && !Contains("round 1"));
  }
}

TEST_CASE("elastic: a node whose restart cannot form because the others finished ends with its failure, not 0",
          "[launch][rendezvous][elastic]") {
  // Node 0's worker ends well; node 1's fails after it, and its restart found the job finished: it
  // exited 0, a failed job reported as done.
  TempDir dir;
  const int port = free_port();
  auto line = [&](const std::string& name) {
    return ddprun() + " --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
           std::to_string(port) + " --rdzv-id failed --rdzv-timeout 30 --rdzv-settle 30 --max-restarts 1 --local-addr " + name +
           " -- sh -c 'touch " + dir.file("$RANK.up") + "; [ $RANK = 0 ] && exit 0; while [ ! -e " + dir.file("0.up") +
           " ]; do sleep 0.05; done; sleep 3; echo failing >&2; exit 7' 2>" + dir.file(name + ".err");
  };
  auto r = run_shell(line("a") + " & A=$!; " + until_accepts(port) + line("b") + "; b=$?; wait $A; echo statuses=$?,$b",
                     std::chrono::seconds(90));
  const std::string a = read_file(dir.file("a.err")), b = read_file(dir.file("b.err"));
  INFO(r.out << "\nnode a:\n" << a << "node b:\n" << b);
  CHECK(count_lines(r.out, "statuses=0,7") == 1);
  CHECK_THAT(b, Contains("the job's other nodes finished before this node's restart could form; not restarting, and "
                         "ending with the failure: ") && !Contains("finished before this node was admitted"));
  CHECK_THAT(a, !Contains("sent no heartbeat"));  // node 1 said it was done
}

TEST_CASE("elastic: a usage error on one node ends the job on every node, though another node's rank fails after it "
          "with a restartable echo",
          "[launch][rendezvous][elastic]") {
  // Node a's rank held its echo (exit 1) for --node-timeout and restarted it, then waited out
  // --rdzv-timeout for node b, which had ended on its usage error.
  TempDir dir;
  const int port = free_port();
  auto line = [&](const std::string& name) {
    return ddprun() + " --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
           std::to_string(port) + " --rdzv-id usage --rdzv-timeout 60 --rdzv-settle 1 --max-restarts 2 --local-addr " +
           name + " -- sh -c 'if [ $RANK = 1 ]; then echo \"ddp-train: rank 1: error: a bad config\" >&2; touch " +
           dir.file("erred") + "; exit 2; fi; while [ ! -e " + dir.file("erred") + " ]; do sleep 0.05; done; "
           "exit 1' 2>" + dir.file(name + ".err");
  };
  auto r = run_shell(line("a") + " & A=$!; " + until_accepts(port) + line("b") + "; b=$?; wait $A; echo statuses=$?,$b",
                     std::chrono::seconds(50));
  const std::string a = read_file(dir.file("a.err"));
  INFO(r.out << "\nnode a:\n" << a << "node b:\n" << read_file(dir.file("b.err")));
  CHECK(count_lines(r.out, "statuses=2,2") == 1);
  CHECK_THAT(a, Contains("stopping this node's workers: ") && Contains("exit code 2"));
  CHECK_THAT(a, !Contains("restarting the workers") && !Contains("round 1"));
}

TEST_CASE("elastic: a member restarting after its failure is that failure on every node, not a node asking to join",
          "[launch][rendezvous][elastic]") {
  // Node a's failure, held for --node-timeout, then its arrival for round 1: node b, holding its
  // rank's echo (exit 1), saw the arrival first and ended round 0 for "a node (a) asks to join".
  TempDir dir;
  const int port = free_port();
  const std::string failed = dir.file("failed");
  auto line = [&](const std::string& name) {
    return ddprun() + " --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
           std::to_string(port) + " --rdzv-id again --rdzv-timeout 60 --rdzv-settle 1 --node-timeout 2 "
           "--max-restarts 1 --local-addr " + name + " -- sh -c 'if [ $RANK = 0 ] && [ ! -e " + failed + " ]; then "
           "touch " + failed + "; exit 5; fi; if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then while [ ! -e " + failed +
           " ]; do sleep 0.05; done; sleep 1; exit 1; fi; echo "
           "ran-again-" + name + "' 2>" + dir.file(name + ".err");
  };
  auto r = run_shell(line("a") + " & A=$!; " + until_accepts(port) + line("b") + "; b=$?; wait $A; echo statuses=$?,$b",
                     std::chrono::seconds(60));
  const std::string b = read_file(dir.file("b.err"));
  INFO(r.out << "\nnode a:\n" << read_file(dir.file("a.err")) << "node b:\n" << b);
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  CHECK_THAT(r.out, Contains("ran-again-a") && Contains("ran-again-b"));
  CHECK_THAT(b, Contains("stopping this node's workers: rank 0 on a: exit code 5") && !Contains("asks to join"));
  CHECK_THAT(b, Contains("failures so far 1 (--max-restarts 1), membership changes 0"));
}

TEST_CASE("elastic: when node 0 finishes and closes its store, the other nodes' workers run on to their end, not "
          "again in a round of their own",
          "[launch][rendezvous][elastic]") {
  TempDir dir;
  const int port = free_port();
  auto line = [&](const std::string& name) {
    return ddprun() + " --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
           std::to_string(port) + " --rdzv-id closed --rdzv-timeout 3 --rdzv-settle 30 --node-timeout 2 --local-addr 127.0.0.1 -- sh "
           "-c '[ $RANK = 0 ] && exit 0; sleep 9; echo ran-to-the-end rank=$RANK world=$WORLD_SIZE' 2>" +
           dir.file(name + ".err");
  };
  auto r = run_shell(line("a") + " & A=$!; " + until_accepts(port) + line("b") + "; b=$?; wait $A; echo statuses=$?,$b",
                     std::chrono::seconds(90));
  const std::string b = read_file(dir.file("b.err"));
  INFO(r.out << "\nnode a:\n" << read_file(dir.file("a.err")) << "node b:\n" << b);
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  CHECK(count_occurrences(r.out, "ran-to-the-end rank=1 world=2") == 1);
  CHECK_THAT(r.out, !Contains("world=1"));
  CHECK_THAT(b, Contains("node 0 finished the job and closed the rendezvous store; this node's workers run on to "
                         "their end") && !Contains("round 1"));
}

TEST_CASE("elastic: a launcher waiting to be admitted to a full job that then finishes says so and exits 0",
          "[launch][rendezvous][elastic]") {
  TempDir dir;
  const int port = free_port();
  std::string endpoint = "127.0.0.1:" + std::to_string(port);
  auto line = [&](const std::string& name, const std::string& seconds) {
    return ddprun() + " --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint " + endpoint +
           " --rdzv-id full --rdzv-timeout 60 --rdzv-settle 1 --local-addr " + name + " -- sh -c 'touch " +
           dir.file(name + ".up") + "; sleep " + seconds + "' 2>" + dir.file(name + ".err");
  };
  // c arrives once the workers of a and b both run: the job is full.
  const std::string both_up = until_true("[ -e " + dir.file("a.up") + " ] && [ -e " + dir.file("b.up") + " ]");
  auto r = run_shell(line("a", "6") + " & A=$!; " + until_accepts(port) + line("b", "4.5") + " & B=$!; " + both_up +
                         line("c", "6") + "; c=$?; wait $A; a=$?; wait $B; echo statuses=$a,$?,$c",
                     std::chrono::seconds(60));
  const std::string c = read_file(dir.file("c.err"));
  INFO(r.out << "\nnode c:\n" << c);
  CHECK(count_lines(r.out, "statuses=0,0,0") == 1);
  CHECK_THAT(c, Contains("the job finished before this node was admitted") && !Contains("lost the rendezvous store"));
}

TEST_CASE("elastic: a launcher of another --nnodes range, or another secret, is refused before it arrives, in one "
          "line, and is never counted toward the job's MIN",
          "[launch][rendezvous][elastic][hmac]") {
  TempDir dir;
  for (const auto& [second, message] : std::vector<std::pair<std::string, std::string>>{
           {"--nnodes 1:3", "was started with --nnodes 1:2 but this node with --nnodes 1:3: give every node the same "
                            "--nnodes"},
           {"--nnodes 1:2 --rdzv-secret-file " + dir.file("other"), "have a different rendezvous secret than this node"}}) {
    write_file(dir.file("other"), "another secret\n");
    const int port = free_port();
    std::string endpoint = "127.0.0.1:" + std::to_string(port);
    auto line = [&](const std::string& nnodes, const std::string& name, int seconds) {
      return ddprun() + " " + nnodes + " --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint " + endpoint +
             " --rdzv-id range --rdzv-timeout 30 --rdzv-settle 1 --local-addr " + name + " -- sh -c 'sleep " +
             std::to_string(seconds) + "; echo ran-" + name + " ws=$WORLD_SIZE' 2>" + dir.file(name + ".err");
    };
    auto r = run_shell(line("--nnodes 1:2", "a", 4) + " & A=$!; " + until_accepts(port) + line(second, "b", 1) +
                           "; b=$?; wait $A; echo statuses=$?,$b",
                       std::chrono::seconds(60));
    const std::string a = read_file(dir.file("a.err")), b = read_file(dir.file("b.err"));
    INFO(second << "\n" << r.out << "\nnode a:\n" << a << "node b:\n" << b);
    CHECK(count_lines(r.out, "statuses=0,2") == 1);  // the job runs on alone (MIN 1); the other is refused
    CHECK_THAT(b, Contains("ddprun: error: ") && Contains(message));
    CHECK_THAT(r.out, !Contains("ran-b") && Contains("ran-a ws=1"));
    CHECK_THAT(a + b, !Contains("round 1") && !Contains("asks to join"));
  }
}

TEST_CASE("a node SIGKILLed before a restart is named within seconds, and the job ends with the failure's status, "
          "not after --rdzv-timeout with a rendezvous error",
          "[launch][rendezvous][faults]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  std::string common = " --nnodes 2 --nproc-per-node 1 --max-restarts 2 --master-addr 127.0.0.1 --master-port " + port +
                       " --rdzv-timeout 120";
  // Node 0's worker fails after 3 s; node 1's launcher is SIGKILLed before the restart.
  const std::string started = dir.file("started");
  auto r = run_shell(ddprun() + " --node-rank 1" + common + " -- sh -c 'touch " + started + "; exec sleep 100' 2>" +
                         dir.file("b.err") + " & B=$!; " + ddprun() + " --node-rank 0" + common +
                         " -- sh -c 'sleep 3; exit 1' 2>" + dir.file("a.err") + " & A=$!; " +
                         until_true("[ -e " + started + " ]", 20) +
                         "kill -9 $B; wait $A; "
                         "echo status=$?",
                     std::chrono::seconds(80));
  const std::string a = read_file(dir.file("a.err"));
  INFO(r.out << "\nnode 0:\n" << a);
  CHECK(count_lines(r.out, "status=1") == 1);
  CHECK_THAT(a, Contains("restart attempt 1 cannot form: node 1's launcher has sent no heartbeat for 15 s (killed, "
                         "or its host lost); not restarting, and ending with the failure"));
}

TEST_CASE("node 0 whose peers never arrive names them, and a node whose node 0 gave up says node 0 went away",
          "[launch][rendezvous]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  // Node 0 waits 10 s for a third node that never comes (node 1, loading LibTorch's store, may take
  // seconds to join it); node 1 joined and waits with it, and would meet the harness's limit before
  // its own --rdzv-timeout if it did not hear that node 0 gave up.
  std::string common = " --nnodes 3 --nproc-per-node 1 --master-port " + port + " -- true";
  auto r = run_shell(ddprun() + " --node-rank 1 --rdzv-timeout 300" + common + " 2>" + dir.file("b.err") +
                         " & B=$!; " + ddprun() + " --node-rank 0 --rdzv-timeout 10" + common + " 2>" +
                         dir.file("a.err") + "; a=$?; wait $B; echo statuses=$a,$?",
                     std::chrono::seconds(60));
  std::string a = read_file(dir.file("a.err")), b = read_file(dir.file("b.err"));
  INFO(r.out << "\nnode 0:\n" << a << "node 1:\n" << b);
  CHECK(count_lines(r.out, "statuses=2,2") == 1);
  CHECK_THAT(a, Contains("timed out after 10 s waiting for node(s) 2 of 3"));
  CHECK_THAT(b, Contains("ddprun: error: lost the rendezvous at 127.0.0.1:" + port +
                         ": node 0's ddprun, which hosts it, went away"));
  CHECK_THAT(b, !Contains("internal error"));
}

TEST_CASE("a service on the master port that is not a store is named at once", "[launch][rendezvous]") {
  // A banner, as an SSH server sends: c10d would read it as a length and fail with std::bad_alloc.
  TempDir dir;
  std::string port = std::to_string(free_port());
  auto banner = listener(dir, "banner.py",
                         "while True:\n"
                         "    c, _ = s.accept()\n"
                         "    try: c.sendall(b'SSH-2.0-OpenSSH_9.2\\r\\n')\n"
                         "    except Exception: pass\n");
  auto r = node_against("python3 " + banner + " " + port + " " + dir.file("up"), dir.file("up"), port, 300);
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=2") == 1);  // at once: --rdzv-timeout 300 outlasts the harness's limit
  CHECK_THAT(r.err, Contains("something that is not a ddprun (c10d) store answers on 127.0.0.1:" + port) &&
                        Contains("SSH-2.0-OpenSSH_9.2"));
  CHECK_THAT(r.err, !Contains("bad_alloc") && !Contains("internal error"));
}

TEST_CASE("a service on the master port that waits to be asked, as HTTP does, is named at once, and a store is not "
          "taken for one", "[launch][rendezvous]") {
  // Quiet until asked: c10d's client would wait for it until --rdzv-timeout (here 300 s).
  TempDir dir;
  std::string port = std::to_string(free_port());
  auto web = listener(dir, "web.py",
                      "import http.server\n"
                      "class Page(http.server.BaseHTTPRequestHandler):\n"
                      "    def do_GET(self): self.send_response(200); self.end_headers(); self.wfile.write(b'hi')\n"
                      "while True:\n"
                      "    c, a = s.accept()\n"
                      "    try: Page(c, a, None)\n"
                      "    except Exception: pass\n"
                      "    c.close()\n");
  auto r = node_against("python3 " + web + " " + port + " " + dir.file("up"), dir.file("up"), port, 300);
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=2") == 1);
  CHECK_THAT(r.err, Contains("something that is not a ddprun (c10d) store answers on 127.0.0.1:" + port +
                             " (it answered an HTTP request with 'HTTP/1.0 200 OK')"));
  // A real store, asked the same, says nothing, logs nothing on its host, and the job runs.
  std::string common = " --nnodes 2 --nproc-per-node 1 --master-port " + port + " -- sh -c 'echo rank=$RANK'";
  // Node 1 starts once node 0's store accepts, so that its probe meets the store, not nothing.
  const std::string accepts = until_accepts(std::stoi(port));
  auto job = run_shell(bin("ddprun") + " --node-rank 0" + common + " 2>" + dir.file("a.err") + " & A=$!; " + accepts + bin("ddprun") + " --node-rank 1" + common + "; b=$?; wait $A; echo statuses=$?,$b",
                       std::chrono::seconds(60));
  INFO(job.out << job.err << read_file(dir.file("a.err")));
  CHECK(count_lines(job.out, "statuses=0,0") == 1);
  CHECK_THAT(job.out, Contains("] rank=1"));
  for (const std::string& err : {read_file(dir.file("a.err")), job.err})
    CHECK_THAT(err, !Contains("error") && !Contains("rror:") && !Contains("query") && !Contains("not a ddprun"));
}

TEST_CASE("a service on the master port that hangs up on every connection is named, and a store that hangs up "
          "once as it closes is not taken for one", "[launch][rendezvous]") {
  // times=-1: hang up on every connection; times=1: on the first, then stop listening, as the store
  // of a job that is ending does to a node that comes too late.
  TempDir dir;
  std::string port = std::to_string(free_port());
  auto hangup = listener(dir, "hangup.py",
                         "times = int(sys.argv[3])\n"
                         "while times != 0:\n"
                         "    c, _ = s.accept(); c.close(); times -= 1\n"
                         "s.close()\n");
  auto late_node = [&](int times) {
    std::string up = dir.file("up" + std::to_string(times));
    return node_against("python3 " + hangup + " " + port + " " + up + " " + std::to_string(times), up, port, 3);
  };
  auto always = late_node(-1);
  INFO(always.out << always.err);
  CHECK(count_lines(always.out, "status=2") == 1);
  CHECK_THAT(always.err, Contains("something that is not a ddprun (c10d) store answers on 127.0.0.1:" + port +
                                  " (it hung up at once)"));
  auto once = late_node(1);
  INFO(once.out << once.err);
  CHECK(count_lines(once.out, "status=0") == 0);
  CHECK_THAT(once.err, !Contains("not a ddprun (c10d) store") && Contains("ddprun: error: "));
}

TEST_CASE("a rank whose peers never arrive says what it waits for, then names them, not a bare Socket Timeout, and "
          "one whose store's host died says so",
          "[launch][rendezvous]") {
  // ddp-train by hand, ranks 0 and 2 of 3: rank 1 never starts.
  TempDir dir;
  std::string port = std::to_string(free_port());
  auto rank = [&](int r) {
    return "OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + std::string(DDP_SOURCE_DIR) +
           "/configs/synthetic_mlp.yaml --rank " + std::to_string(r) + " --world-size 3 --master-port " + port +
           " --set dist.timeout_s=15 --set run.output_dir=" + dir.file("run" + std::to_string(r));
  };
  auto r = run_shell(rank(2) + " 2>" + dir.file("r2.err") + " & B=$!; " + rank(0) + " 2>" + dir.file("r0.err") +
                         "; a=$?; wait $B; echo statuses=$a,$?",
                     std::chrono::seconds(60));
  std::string r0 = read_file(dir.file("r0.err"));
  INFO(r.out << "\nrank 0:\n" << r0 << "rank 2:\n" << read_file(dir.file("r2.err")));
  CHECK(count_lines(r.out, "statuses=1,1") == 1);
  CHECK_THAT(r0, Contains("ddp-train: rank 0: failed: rank(s) 1 of 3 never arrived at the store at 127.0.0.1:" + port +
                          " within 15 s (dist.timeout_s)"));
  CHECK_THAT(r0, Catch::EndsWith("MASTER_PORT and WORLD_SIZE?\n"));  // rank 0 waits for them itself: no lower cause
  // Said while waiting, once (a third of dist.timeout_s, at most 10 s): the wait was silent.
  const std::string waiting = " still waiting after 5 s for all 3 ranks to meet at 127.0.0.1:" + port +
                              " (dist.timeout_s 15 s): is every rank started, with the same MASTER_ADDR, MASTER_PORT "
                              "and WORLD_SIZE?";
  CHECK(count_occurrences(r.out, "warning: rank 0:" + waiting) == 1);
  CHECK(count_occurrences(r.out, "warning: rank 2:" + waiting) == 1);
  // Rank 2 times out as well, or first loses the store with rank 0 (whichever comes first).
  CHECK_THAT(read_file(dir.file("r2.err")), Contains("ddp-train: rank 2: failed: "));

  // Rank 0 killed while rank 1 waits for rank 2: c10d said only "Connection reset by peer".
  port = std::to_string(free_port());
  auto waiting_rank = [&](int r) {
    return "OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + std::string(DDP_SOURCE_DIR) +
           "/configs/synthetic_mlp.yaml --rank " + std::to_string(r) + " --world-size 3 --master-port " + port +
           " --set dist.timeout_s=12 --set run.output_dir=" + dir.file("lost" + std::to_string(r)) + " >" +
           dir.file("lost" + std::to_string(r) + ".out") + " 2>" + dir.file("lost" + std::to_string(r) + ".err");
  };
  // Both wait (their notices said so) before rank 0 is killed: rank 1 is then past connecting.
  auto lost = run_shell(waiting_rank(0) + " & A=$!; " + waiting_rank(1) + " & B=$!; " +
                            until_true("grep -qs 'still waiting' " + dir.file("lost0.out") +
                                           " && grep -qs 'still waiting' " + dir.file("lost1.out"),
                                       30) +
                            "kill -KILL $A; wait $B; "
                            "echo status=$?",
                        std::chrono::seconds(60));
  const std::string lost1 = read_file(dir.file("lost1.err"));
  INFO(lost.out << "\nrank 1:\n" << read_file(dir.file("lost1.out")) << lost1);
  CHECK(count_lines(lost.out, "status=1") == 1);
  CHECK_THAT(lost1, Contains("ddp-train: rank 1: failed: the store at 127.0.0.1:" + port + " went away while rank 1 "
                             "met the others: rank 0, which hosts it, stopped (see its output)"));
}

TEST_CASE("rank 0 started by hand on a port in use says so, checked by binding it, not by c10d's words",
          "[launch][rendezvous]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  // Node 0 of a job that waits for its second node holds the port.
  auto r = run_shell(bin("ddprun") + " --nnodes 2 --node-rank 0 --master-port " + port + " --rdzv-timeout 30 -- true "
                         "2>/dev/null & H=$!; " + until_accepts(std::stoi(port)) + "OMP_NUM_THREADS=1 " + bin("ddp-train") + " " +
                         std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml --rank 0 --world-size 2 "
                         "--master-port " + port + " --set run.output_dir=" + dir.file("run") +
                         "; echo status=$?; kill $H; wait $H",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=2") == 1);
  CHECK_THAT(r.err, Contains("ddp-train: rank 0: error: rank 0 cannot host the store at 127.0.0.1:" + port +
                             ": the port is in use (choose another --master-port or $MASTER_PORT)"));
  CHECK_THAT(r.err, !Contains("c10d") && !Contains("InitGoogleLogging"));  // was: four glog lines first
}

TEST_CASE("ddp-train alone in its world binds no port: it trains beside a process that holds MASTER_PORT",
          "[launch][rendezvous]") {
  // Was: a TCPStore on MASTER_PORT (29500 unless set) on every interface, so two runs side by side
  // (`ddp-train a.yaml & ddp-train b.yaml`) failed on the port.
  TempDir dir;
  std::string port = std::to_string(free_port());
  auto r = run_shell(bin("ddprun") + " --nnodes 2 --node-rank 0 --master-port " + port +
                         " --rdzv-timeout 30 -- true "
                         "2>/dev/null & H=$!; " +
                         until_accepts(std::stoi(port)) + "OMP_NUM_THREADS=1 MASTER_PORT=" + port + " " +
                         bin("ddp-train") + " " + std::string(DDP_SOURCE_DIR) +
                         "/configs/synthetic_mlp.yaml --set train.max_steps=2 --set run.output_dir=" + dir.file("run") +
                         "; echo status=$?; kill $H; wait $H",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=0") == 1);
  CHECK_THAT(r.err, !Contains("cannot host the store"));
}

}  // namespace DDP_TEST_FILE
