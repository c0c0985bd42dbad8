// The launcher under a careless user and a hostile neighbour (issue 12): closed standard streams,
// descriptors leaking into workers, SIGHUP, log files planted as symlinks.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "ddp/launch/machine.h"
#include "ddp/launch/process.h"
#include "support/leftovers.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace fs = std::filesystem;

TEST_CASE("ddprun started with stdin and stdout closed still kills its workers when SIGKILLed", "[launch][hardening]") {
  for (const char* closed : {"<&-", ">&-", "<&- >&-"}) {
    TempDir dir;
    std::string sleeper = "sleep 67.5" + std::to_string(std::string(closed).size());
    auto r = run_shell("(" + bin("ddprun") + " --standalone --nproc-per-node 2 -- sh -c '" + sleeper + " & echo $! > " +
                           dir.path() + "/pid.$RANK; wait' " + closed + " 2>/dev/null & L=$!; "
                           "while [ ! -s " + dir.path() + "/pid.1 ] || [ ! -s " + dir.path() + "/pid.0 ]; do sleep 0.05; done; "
                           "kill -KILL $L)",
                       std::chrono::seconds(30));
    INFO(closed << "\n" << r.out << r.err);
    for (int i = 0; i < 50 && !find_processes(sleeper).empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(find_processes(sleeper).empty());
  }
}

TEST_CASE(
    "a worker the kernel's out-of-memory killer ends is said to be out of memory, and a SIGKILL from "
    "elsewhere is not",
    "[launch][hardening]") {
  // A memory cgroup of 500 MiB (v1, or v2 where it is the one hierarchy), and a worker that writes 2 GiB.
  const std::string name = "ddprun-test-" + std::to_string(getpid());
  std::string group, limit;
  for (const auto& [dir, file] : {std::pair<std::string, std::string>{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"},
                                  {"/sys/fs/cgroup", "memory.max"}}) {
    std::error_code error;
    if (!fs::exists(dir + "/cgroup.procs") || !fs::create_directory(dir + "/" + name, error) || error) continue;
    if (fs::exists(dir + "/" + name + "/" + file)) {
      group = dir + "/" + name, limit = file;
      break;
    }
    fs::remove(dir + "/" + name, error);
  }
  if (group.empty()) {
    WARN("skipped: no memory cgroup can be made here (needs root and a memory controller), so no OOM kill to see");
    return;
  }
  // Removed however the test ends (the worker is gone by then: ddprun waits for its group).
  struct Removed {
    std::string group;
    ~Removed() {
      std::error_code error;
      for (int i = 0; i < 50 && !fs::remove(group, error); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } removed{group};
  write_file(group + "/" + limit, std::to_string(500 << 20));
  // No swap to go to instead: the write is killed, not swapped out.
  if (fs::exists(group + "/memory.memsw.limit_in_bytes"))
    write_file(group + "/memory.memsw.limit_in_bytes", std::to_string(500 << 20));
  if (fs::exists(group + "/memory.swap.max")) write_file(group + "/memory.swap.max", "0");
  auto r = run_shell("sh -c 'echo $$ > " + group + "/cgroup.procs; exec " + bin("ddprun") +
                         " --standalone --nproc-per-node 1 -- /usr/bin/python3 -c \"x = b\\\"x\\\" * (2 << 30)\"'",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 137);
  CHECK_THAT(r.err, Contains("rank 0 failed first: signal 9 (SIGKILL)") &&
                        Contains("the kernel's out-of-memory killer ended ") &&
                        Contains("most likely rank 0, the node (or its memory cgroup) out of memory"));
  // A SIGKILL someone sent: no word of memory (unless the machine's count moved meanwhile, which
  // the launcher cannot tell from its own).
  const auto before = ddp::out_of_memory_kills();
  auto killed =
      run_shell(bin("ddprun") + " --standalone --nproc-per-node 1 -- sh -c 'kill -KILL $$'", std::chrono::seconds(30));
  INFO(killed.out << killed.err);
  CHECK(killed.exit_code == 137);
  CHECK_THAT(killed.err, Contains("failed first: signal 9 (SIGKILL)"));
  if (ddp::out_of_memory_kills() == before) CHECK_THAT(killed.err, !Contains("out-of-memory"));
}

TEST_CASE("a worker inherits stdin, stdout, stderr and the heartbeat pipe, nothing else", "[launch][hardening]") {
  // With a program, the launcher hosts a TCPStore, whose pipes and sockets once leaked. The worker
  // lists its open descriptors above 2 with shell builtins only, so it opens none of its own.
  const std::string list_fds =
      "i=3; while [ $i -lt 1024 ]; do [ -e /proc/$$/fd/$i ] && printf '%s ' $i; i=$((i+1)); done; echo end";
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2", "--", "sh", "-c", list_fds},
                       std::chrono::seconds(30));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(count_lines(r.out, "[rank 0] 3 end") == 1);  // 3: the heartbeat pipe
  CHECK(count_lines(r.out, "[rank 1] 3 end") == 1);
}

TEST_CASE("SIGHUP or SIGQUIT to ddprun is a stop request: the workers checkpoint and stop, and ddprun exits 129 or 131",
          "[launch][hardening][slow]") {
  // A hangup reaches the workers as SIGTERM; Ctrl-\\ as itself, as under torchrun, and ddp-train stops
  // for it too. ddprun used not to handle SIGQUIT: it died of it, and the watchdog killed the workers.
  for (const auto& [signal, passed_on] : std::vector<std::pair<std::string, std::string>>{{"HUP", "TERM"}, {"QUIT", "QUIT"}}) {
    INFO("SIG" << signal);
    struct sigaction hangup = {};
    if (signal == "HUP" && sigaction(SIGHUP, nullptr, &hangup) == 0 && hangup.sa_handler == SIG_IGN) {
      WARN(
          "skipped: SIGHUP is ignored in this process (started under nohup?), and so in the ddprun it starts, "
          "which then keeps it ignored as nohup asks");
      continue;
    }
    TempDir dir;
    std::string out = dir.file("run");
    std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                          std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml --set run.output_dir=" + out +
                          " --set train.max_steps=100000 --set train.epochs=1000 --set checkpoint.every_epochs=0"
                          " --set data.eval_split=none --set train.log_every=10";
    auto first = run_shell(command + " & L=$!; " + until_true("[ -s " + out + "/metrics.jsonl ]", 30) +
                               "sleep 0.3; kill -" + signal +
                               " $L; wait $L; "
                               "echo status=$?",
                           std::chrono::seconds(120));
    INFO(first.out << first.err);
    CHECK(count_lines(first.out, "status=" + std::to_string(signal == "HUP" ? 129 : 131)) == 1);
    CHECK_THAT(first.err, Contains("received SIG" + signal));
    CHECK_THAT(first.out, Contains("as asked (SIG" + passed_on + "); checkpoint saved"));
    CHECK(run_shell("pgrep -f '[d]dp-train.*" + out + "'").out.empty());
    bool saved = false;
    for (const auto& entry : fs::directory_iterator(out + "/checkpoints")) saved |= entry.path().extension() == ".json";
    CHECK(saved);
    check_nothing_left(out);
  }
}

TEST_CASE("under nohup a hangup does not stop ddprun, as nohup asks", "[launch][hardening]") {
  // Was: the SignalPipe's handler replaced nohup's SIG_IGN, and a logout stopped the run.
  TempDir dir;
  auto r = run_shell("nohup " + bin("ddprun") + " --standalone -- sh -c 'sleep 2; echo finished' > " + dir.file("out") +
                         " 2>&1 & L=$!; sleep 0.7; kill -HUP $L; wait $L; echo status=$?",
                     std::chrono::seconds(60));
  const std::string said = read_file(dir.file("out"));
  INFO(r.out << r.err << said);
  CHECK(count_lines(r.out, "status=0") == 1);
  CHECK_THAT(said, Contains("[rank 0] finished") && !Contains("SIGHUP"));
}

TEST_CASE("log files planted as symlinks are refused, never followed", "[launch][hardening]") {
  TempDir dir;
  std::string victim = dir.file("victim.txt");
  write_file(victim, "precious\n");
  // --log-dir DIR writes DIR/<run id>/attempt_<n>/<rank>/stdout.log and stderr.log: plant one.
  fs::create_directories(dir.file("logs/planted/attempt_0/0"));
  fs::create_symlink(victim, dir.file("logs/planted/attempt_0/0/stdout.log"));
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "1", "--log-dir", dir.file("logs"), "--run-id",
                        "planted", "--", "echo", "overwritten"},
                       std::chrono::seconds(30));
  INFO(r.out << r.err);
  CHECK(read_file(victim) == "precious\n");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains("0/stdout.log") && Contains("symbolic link"));
}

TEST_CASE("a SIGKILLed ddprun leaves no private store directory behind", "[launch][hardening]") {
  TempDir dir;
  std::string out = dir.file("run");
  auto r =
      run_shell("TMPDIR=" + dir.path() + " OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                    std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml --set run.output_dir=" + out +
                    " --set train.max_steps=100000 --set train.epochs=1000 --set data.eval_split=none & L=$!; " +
                    until_true("[ -s " + out + "/metrics.jsonl ]", 30) + "ls -d " + dir.path() +
                    "/ddprun-store-*; kill -KILL $L; wait $L; echo status=$?",
                std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=137") == 1);
  CHECK_THAT(r.out, Contains("/ddprun-store-"));  // it existed while the run did
  bool left = true;
  for (int i = 0; i < 50 && left; ++i) {
    left = false;
    for (const auto& entry : fs::directory_iterator(dir.path()))
      left |= entry.path().filename().string().rfind("ddprun-store-", 0) == 0;
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK_FALSE(left);
  CHECK(run_shell("pgrep -f '[d]dp-train.*" + out + "'").out.empty());
}

TEST_CASE("kill -9 of ddprun's whole process group leaves no store directory, and a later run sweeps orphaned ones",
          "[launch][hardening][issue22]") {
  TempDir dir;
  std::string out = dir.file("run");
  std::string train = "TMPDIR=" + dir.path() + " OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                      std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml --set data.eval_split=none ";
  // setsid: ddprun leads a process group of its own, which is killed whole, as a job scheduler may.
  auto r = run_shell("setsid env " + train + "--set run.output_dir=" + out +
                         " --set train.max_steps=100000 "
                         "--set train.epochs=1000 & L=$!; " +
                         until_true("[ -s " + out + "/metrics.jsonl ]", 30) + "ls -d " + dir.path() +
                         "/ddprun-store-*; /bin/kill -KILL -- -$L; "
                         "wait $L; echo status=$?",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=137") == 1);
  CHECK_THAT(r.out, Contains("/ddprun-store-"));  // it existed while the run did
  check_nothing_left(out, dir.path());

  // What even the watchdog could not remove (it was killed too): one whose owner lock nobody holds
  // is swept by the next run; one whose owner lives, and one without an owner lock, are not.
  for (const char* name : {"ddprun-store-orphan", "ddprun-store-alive", "ddprun-store-nolock"}) fs::create_directory(dir.file(name));
  write_file(dir.file("ddprun-store-orphan/.owner.lock"), "");
  write_file(dir.file("ddprun-store-alive/.owner.lock"), "");
  // The holder is one process (the sleep holds the locked descriptor), so that `kill $F` ends it.
  auto next = run_shell(
      "sh -c 'exec 9>" + dir.file("ddprun-store-alive/.owner.lock") + "; flock 9 && touch " + dir.file("locked") +
          "; exec sleep 30.25' >/dev/null 2>&1 & F=$!; " + until_true("[ -e " + dir.file("locked") + " ]", 30) + train +
          "--set run.output_dir=" + dir.file("next") + " --set train.max_steps=2; echo status=$?; kill $F",
      std::chrono::seconds(60));
  INFO(next.out << next.err);
  CHECK(count_lines(next.out, "status=0") == 1);
  CHECK_FALSE(fs::exists(dir.file("ddprun-store-orphan")));
  CHECK(fs::exists(dir.file("ddprun-store-alive")));
  CHECK(fs::exists(dir.file("ddprun-store-nolock")));
}

TEST_CASE("a run id used again keeps the earlier launch's logs beside the new ones", "[launch][hardening][issue22]") {
  TempDir dir;
  for (const char* word : {"first", "second", "third"}) {
    auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "1", "--log-dir", dir.file("logs"), "--run-id",
                          "again", "--", "sh", "-c", std::string("echo ") + word + "; echo " + word + " >&2"},
                         std::chrono::seconds(30));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  std::string logs = dir.file("logs/again/attempt_0/0");
  CHECK(read_file(logs + "/stdout.log") == "third\n");
  CHECK(read_file(logs + "/stdout.log.1") == "first\n");  // the oldest has the lowest number
  CHECK(read_file(logs + "/stdout.log.2") == "second\n");
  CHECK(read_file(logs + "/stderr.log.1") == "first\n");
}

TEST_CASE("a --log-dir that is a dangling symbolic link is named as one, and nothing runs", "[launch][hardening]") {
  TempDir dir;
  fs::create_symlink(dir.file("gone"), dir.file("logs"));
  for (const std::string& below : {std::string(""), std::string("/deeper")}) {
    auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "1", "--log-dir", dir.file("logs") + below,
                          "--run-id", "dangling", "--", "sh", "-c", "touch " + dir.file("ran")},
                         std::chrono::seconds(30));
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("--log-dir: " + dir.file("logs") + " is a symbolic link to " + dir.file("gone") +
                               ", which does not exist; create its target or choose another --log-dir"));
    CHECK_THAT(r.err, !Contains("File exists"));
    CHECK_FALSE(fs::exists(dir.file("ran")));
  }
}

TEST_CASE("the stall timeout names the rank that is stopped, not the one that waits for it", "[launch][hardening]") {
  // Both ranks beat (step 7) every 0.1 s. Rank 0 then goes quiet first, as a rank waiting in a
  // collective would; rank 1 is SIGSTOPped once it has. The longest-silent rank is rank 0. Each
  // step waits for the one before (a file), so load moves none of them past the stall timeout.
  TempDir dir;
  write_file(dir.file("worker.sh"),
             "echo $$ > " + dir.path() + "/pid.$RANK\n"
             "i=0\n"
             "while [ $i -lt 600 ]; do\n"
             "  [ $RANK = 0 ] && [ -e " + dir.path() + "/quiet ] && touch " + dir.path() + "/silent && exec sleep 31.75\n"
             "  printf '\\007\\000\\000\\000\\000\\000\\000\\000' >&$DDPRUN_HEARTBEAT_FD\n"
             "  touch " + dir.path() + "/beat.$RANK\n"
             "  sleep 0.1; i=$((i+1))\n"
             "done\n");
  auto r = run_shell(bin("ddprun") + " --standalone --nproc-per-node 2 --stall-timeout 5 --shutdown-grace 1 -- sh " +
                         dir.file("worker.sh") + " & L=$!; while [ ! -e " + dir.path() + "/beat.0 ] || [ ! -e " +
                         dir.path() + "/beat.1 ]; do sleep 0.05; done; touch " + dir.path() + "/quiet; while [ ! -e " +
                         dir.path() + "/silent ]; do sleep 0.05; done; kill -STOP $(cat " + dir.path() +
                         "/pid.1); wait $L; echo status=$?",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=1") == 1);
  CHECK_THAT(r.err, Contains("rank 1 on") && Contains("is stopped (process state T: SIGSTOP or a debugger)") &&
                        Contains("the others' last heartbeats: rank 0 at step 7"));
  CHECK(find_processes("sleep 31.75").empty());
}

namespace {

// Two one-worker nodes on this host, with `environment` on both; once both workers run, a Python
// TCPStore client from outside the job sets the failure key of attempt 0 to a value with a terminal
// escape sequence. The workers stay until both launchers have read it (their stderr is collected
// in a file the workers watch, at most 60 s): a fixed sleep let a slow `import torch` on a loaded
// machine find the job over. The output ends with "statuses=A,B" (node 0's and node 1's exit codes).
CommandResult two_nodes_with_forged_failure(const std::string& environment, const TempDir& dir) {
  std::string port = std::to_string(free_port());
  const std::string err = dir.file("launchers.err");
  std::string common = " --nnodes 2 --nproc-per-node 1 --master-port " + port +
                       " --rdzv-timeout 30 -- sh -c "
                       "'touch " +
                       dir.path() + "/up.$RANK; env | grep -c DDPRUN_RDZV_SECRET; " +
                       until_true("[ $(grep -c \"failure in the rendezvous store\" " + err + ") -ge 2 ]") + "' 2>> " +
                       err;
  write_file(dir.file("forge.py"), "import sys, datetime, torch.distributed as d\n"
                                   "s = d.TCPStore('127.0.0.1', int(sys.argv[1]), is_master=False,\n"
                                   "               timeout=datetime.timedelta(seconds=20))\n"
                                   "s.set('ddprun/attempt_0/failure', sys.argv[2].encode('latin-1'))\n");
  return run_shell(environment + " " + bin("ddprun") + " --node-rank 1" + common + " & B=$!; " + environment + " " +
                       bin("ddprun") + " --node-rank 0" + common + " & A=$!; while [ ! -e " + dir.path() +
                       "/up.0 ] || [ ! -e " + dir.path() + "/up.1 ]; do sleep 0.05; done; /usr/bin/python3 " +
                       dir.file("forge.py") + " " + port + " \"$(printf '1 f \\033]2;owned\\007 forged')\"; wait $A; "
                       "a=$?; wait $B; b=$?; cat " + err + " >&2; echo statuses=$a,$b",
                   std::chrono::seconds(120));
}

}  // namespace

TEST_CASE("with a job secret, a failure SET from outside the job does not stop it, and is shown escaped",
          "[launch][hardening][hmac]") {
  TempDir dir;
  auto r = two_nodes_with_forged_failure("DDPRUN_RDZV_SECRET=s3cret", dir);
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "statuses=0,0") == 1);  // both nodes ran to the end
  CHECK_THAT(r.err, Contains("ignoring ddprun/attempt_0/failure in the rendezvous store: it has no valid tag"));
  CHECK_THAT(r.err, Contains("\\x1b]2;owned\\x07 forged"));
  CHECK(r.err.find('\x1b') == std::string::npos);  // no raw escape sequence reached the terminal
  CHECK_THAT(r.err, !Contains("anyone who reaches port"));
  // The secret stays with the launchers: no worker sees it.
  CHECK(count_lines(r.out, "[" + ddp::host_name() + ":rank 0] 0") == 1);
  CHECK(count_lines(r.out, "[" + ddp::host_name() + ":rank 1] 0") == 1);
}

TEST_CASE("without a secret a multi-node run warns once, and what it prints from the store is escaped",
          "[launch][hardening][hmac]") {
  TempDir dir;
  auto r = two_nodes_with_forged_failure("", dir);
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "statuses=0,0") == 0);  // an outsider could stop it: the documented risk
  CHECK_THAT(r.err, Contains("anyone who reaches port"));
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK_THAT(r.err, Contains("\\x1b]2;owned\\x07 forged"));
  check_nothing_left(dir.path());
}

TEST_CASE("the failure summary shows a worker's message, not the C++ backtrace after it", "[launch][hardening]") {
  std::string frames;
  for (int i = 0; i < 30; ++i) frames += "echo 'frame #" + std::to_string(i) + ": 0x7f00 in c10::something()' >&2; ";
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "1", "--", "sh", "-c",
                        "echo 'the real message' >&2; echo 'Exception raised from f at x.cpp:1 (most recent call "
                        "first):' >&2; " + frames + "exit 1"},
                       std::chrono::seconds(30));
  INFO(r.err);
  CHECK(r.exit_code == 1);
  auto summary = r.err.substr(r.err.find("failed first"));
  CHECK_THAT(summary, Contains("| the real message"));
  CHECK_THAT(summary, !Contains("| frame #"));
}

TEST_CASE("what a worker started in a session of its own ends with the run, named on one line", "[launch][hardening]") {
  // setsid takes the process out of the worker's group, which is what the launcher signals; the
  // launcher, a subreaper, adopts it when the worker ends and ends it with the attempt (torchrun
  // leaves it running). The stray writes its pid once it is in its new session, and the worker
  // then exits 0.
  TempDir dir;
  const std::string stray = "sleep 83.25";
  write_file(dir.file("worker.sh"), "setsid sh -c 'echo $$ > " + dir.path() + "/stray; exec " + stray + "' &\n"
                                    "while [ ! -s " + dir.path() + "/stray ]; do sleep 0.05; done\n");
  auto r = run_shell(bin("ddprun") + " --standalone --nproc-per-node 1 -- sh " + dir.file("worker.sh"),
                     std::chrono::seconds(30));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  const std::string pid = read_file(dir.file("stray")).substr(0, read_file(dir.file("stray")).find('\n'));
  CHECK(count_lines(r.err, "ddprun: ended 1 process the workers left running outside their process groups (a "
                           "setsid or a daemon): " + pid + " (sleep)") == 1);
  for (int i = 0; i < 50 && !find_processes(stray).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(find_processes(stray).empty());
  for (const int left : find_processes(stray)) kill(left, SIGKILL);  // not left behind by a failed run
}

TEST_CASE("what a worker left in its own group ends with it, and its zombie does not read as a survivor",
          "[launch][hardening]") {
  // The background sleep, killed with the worker's group, is adopted by the launcher (a subreaper):
  // unreaped, it kept the group found, and every stop waited 2 s to say "outlived SIGKILL".
  const std::string left = "sleep 83.5";
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2", "--", "sh", "-c", left + " & echo done"},
                       std::chrono::seconds(30));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(count_lines(r.out, "[rank 1] done") == 1);
  CHECK_THAT(r.err, !Contains("outlived SIGKILL"));
  CHECK(find_processes(left).empty());
  for (const int pid : find_processes(left)) kill(pid, SIGKILL);  // not left behind by a failed run
}

}  // namespace DDP_TEST_FILE
