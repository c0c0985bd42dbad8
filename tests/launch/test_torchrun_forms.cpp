// torchrun's command lines with ddprun in its place, checked against torchrun itself (Debian's
// python3-torch, 1.13: underscore spellings only): the same script, module or program sees the same
// ranks, arguments and role, and --redirects/--tee leave the same files.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <map>
#include <sstream>

#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

bool python_has_torch() {
  static const bool has = run_command({kPython, "-c", "import torch.distributed.run"}).exit_code == 0;
  return has;
}

// Each rank's lines, without ddprun's "[rank N] " or torchrun's "[ROLEn]:" prefix, sorted.
std::vector<std::string> rank_lines(const std::string& out, const std::string& marker) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    line = std::regex_replace(line, std::regex(R"(^(\[rank \d+\] |\[\w+?\d+\]:))"), "");
    if (line.rfind(marker, 0) == 0) lines.push_back(line);
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

CommandResult torchrun(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  // Not --standalone: torch 1.13's always hosts its store on localhost:29400, and a second torchrun
  // there (another test, under ctest --parallel) quietly joins the first one's rendezvous and fails
  // when that one ends (issue 45, item 10). A port of its own per launch keeps them apart.
  args.insert(args.begin(), {kPython, "-m", "torch.distributed.run", "--nnodes", "1", "--rdzv_backend", "c10d",
                             "--rdzv_endpoint", "localhost:" + std::to_string(free_port())});
  return run_command(args, std::chrono::seconds(120), env);
}

// Debian's torch 1.13 on Python 3.11 cannot start without --redirects and --tee of 1 or 2: its
// defaults, "0", read as None (Python 3.11's Flag enum no longer lists 0), and start_processes then
// fails. Teeing stdout keeps every line on its console too, behind "[default0]:".
CommandResult torchrun_teeing(std::vector<std::string> args, const std::string& log_dir,
                              const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), {"--redirects", "1", "--tee", "1", "--log_dir", log_dir});
  return torchrun(args, env);
}

CommandResult ddprun(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), {bin("ddprun"), "--standalone"});
  std::vector<std::string> with_python = env;
  with_python.push_back(std::string("DDPRUN_PYTHON=") + kPython);
  return run_command(args, std::chrono::seconds(120), with_python);
}

// A DDP step in Python: each rank all-reduces its rank + 1 and prints what it saw.
constexpr const char* kScript = R"PY(import os, sys
import torch, torch.distributed as dist
dist.init_process_group('gloo')
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print('seen rank', dist.get_rank(), 'of', dist.get_world_size(), 'local', os.environ['LOCAL_RANK'],
      'role', os.environ.get('ROLE_NAME'), 'argv', sys.argv[1:], 'sum', int(t.item()), 'main', __name__, flush=True)
dist.destroy_process_group()
)PY";

// Every file under a log directory, by relative path with its RUN_ID directory as RUN, and its content.
std::map<std::string, std::string> files(const std::string& root) {
  std::map<std::string, std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    auto relative = std::filesystem::relative(entry.path(), root).string();
    found["RUN" + relative.substr(relative.find('/'))] = read_file(entry.path().string());
  }
  return found;
}

}  // namespace

TEST_CASE("ddprun runs a torch.distributed script, a module and a program as torchrun runs them",
          "[launch][torchrun][python]") {
  if (!python_has_torch()) {
    WARN("skipped: " << kPython << " has no torch (Debian's python3-torch): nothing to compare with");
    return;
  }
  TempDir dir;
  write_file(dir.file("train.py"), kScript);
  std::filesystem::create_directories(dir.file("pkg"));
  write_file(dir.file("pkg/__init__.py"), "");
  write_file(dir.file("pkg/train.py"), kScript);
  write_file(dir.file("prog.sh"), "#!/bin/sh\necho seen rank $RANK of $WORLD_SIZE local $LOCAL_RANK role $ROLE_NAME args \"$@\"\n");
  chmod(dir.file("prog.sh").c_str(), 0755);
  const std::vector<std::string> path = {"PYTHONPATH=" + dir.path()};

  struct Form {
    std::string name;
    std::vector<std::string> args;
  };
  const std::vector<Form> forms = {
      {"script", {"--nproc_per_node", "2", dir.file("train.py"), "--lr", "0.1", "--nproc-per-node", "5"}},
      {"module", {"--nproc_per_node=2", "-m", "pkg.train", "--epochs", "3"}},
      {"run path", {"--nproc_per_node", "2", "--run_path", dir.file("train.py"), "x"}},
      {"program", {"--nproc_per_node", "2", "--no_python", dir.file("prog.sh"), "--flag", "-m"}},
      {"role", {"--nproc_per_node", "2", "--role", "trainer", dir.file("train.py")}},
  };
  for (const auto& form : forms) {
    SECTION(form.name) {
      auto theirs = torchrun_teeing(form.args, dir.file("torchrun_logs"), path);
      INFO("torchrun: " << theirs.out << theirs.err);
      REQUIRE(theirs.exit_code == 0);
      auto ours = ddprun(form.args, path);
      INFO("ddprun: " << ours.out << ours.err);
      REQUIRE(ours.exit_code == 0);
      auto expected = rank_lines(theirs.out, "seen rank");
      CHECK(expected.size() == 2);
      CHECK(rank_lines(ours.out, "seen rank") == expected);
    }
  }
}

TEST_CASE(
    "a torch 1.13 script sees torchrun's NCCL error handling and error file, and a failed rank's @record "
    "report is said",
    "[launch][torchrun][python]") {
  if (!python_has_torch()) {
    WARN("skipped: " << kPython << " has no torch (Debian's python3-torch): nothing to compare with");
    return;
  }
  TempDir dir;
  write_file(dir.file("env.py"),
             "import os\n"
             "for name in ('NCCL_ASYNC_ERROR_HANDLING', 'TORCH_NCCL_ASYNC_ERROR_HANDLING'):\n"
             "    print('seen', name, os.environ.get(name))\n"
             "f = os.environ.get('TORCHELASTIC_ERROR_FILE', '')\n"
             "print('seen error file', os.path.basename(f), os.path.isdir(os.path.dirname(f) or '/none'))\n");
  auto theirs = torchrun_teeing({"--nproc_per_node", "1", dir.file("env.py")}, dir.file("theirs"));
  INFO("torchrun: " << theirs.out << theirs.err);
  REQUIRE(theirs.exit_code == 0);
  auto ours = ddprun({"--log-dir", dir.file("ours"), dir.file("env.py")});
  INFO("ddprun: " << ours.out << ours.err);
  REQUIRE(ours.exit_code == 0);
  CHECK(rank_lines(ours.out, "seen") == rank_lines(theirs.out, "seen"));
  CHECK(count_lines(ours.out, "[rank 0] seen NCCL_ASYNC_ERROR_HANDLING 1") == 1);  // torch 1.13's name

  write_file(dir.file("fails.py"),
             "import os\n"
             "from torch.distributed.elastic.multiprocessing.errors import record\n"
             "@record\n"
             "def main():\n"
             "    if os.environ['RANK'] == '1': raise RuntimeError('boom on rank one')\n"
             "main()\n");
  auto failed = ddprun({"--nproc-per-node", "2", "--log-dir", dir.file("failed"), dir.file("fails.py")});
  INFO("ddprun: " << failed.out << failed.err);
  CHECK(failed.exit_code == 1);
  CHECK_THAT(failed.err,
             Contains("ddprun: rank 1's error file (@record): RuntimeError: boom on rank one (" + dir.file("failed")));
}

TEST_CASE("torchrun's --redirects and --tee lay out the same log files as torchrun's and keep redirected streams off the console",
          "[launch][torchrun][logs]") {
  if (!python_has_torch()) {
    WARN("skipped: " << kPython << " has no torch (Debian's python3-torch): nothing to compare with");
    return;
  }
  TempDir dir;
  // torch 1.13 on Python 3.11 cannot read 0, 3 or a per-rank mapping (its Std enum lost them), so
  // the comparison uses 1 and 2; the mapping is checked on ddprun alone below.
  std::vector<std::string> args = {"--nproc_per_node", "2", "--redirects", "1", "--tee", "2",
                                   "--no_python", "sh", "-c", "echo out $RANK; echo err $RANK >&2"};
  std::vector<std::string> theirs_args = {"--log_dir", dir.file("theirs")};
  theirs_args.insert(theirs_args.end(), args.begin(), args.end());
  auto theirs = torchrun(theirs_args);
  INFO("torchrun: " << theirs.out << theirs.err);
  REQUIRE(theirs.exit_code == 0);
  std::vector<std::string> ours_args = {"--log-dir", dir.file("ours"), "--run-id", "job7"};
  ours_args.insert(ours_args.end(), args.begin(), args.end());
  auto ours = ddprun(ours_args);
  INFO("ddprun: " << ours.out << ours.err);
  REQUIRE(ours.exit_code == 0);
  auto expected = files(dir.file("theirs"));
  CHECK(expected.size() == 4);
  CHECK(files(dir.file("ours")) == expected);
  CHECK_THAT(ours.out, !Contains("out 0") && !Contains("out 1"));
  CHECK(count_lines(ours.err, "[rank 0] err 0") == 1);
  CHECK(count_lines(ours.err, "[rank 1] err 1") == 1);
  std::string run = std::filesystem::directory_iterator(dir.file("ours"))->path().string();
  CHECK(std::filesystem::path(run).filename().string() == "job7");  // Note [Log layout]: no random suffix
  CHECK_THAT(ours.err, Contains("workers' logs (--redirects/--tee) go to " + run));
}

TEST_CASE("torchrun's --redirects and --tee by local rank: 0 sends stdout to its file and tees stderr, 1 both to files only",
          "[launch][torchrun][logs]") {
  TempDir dir;
  auto mapped = ddprun({"--log-dir", dir.file("mapped"), "--nproc-per-node", "2", "--redirects", "0:1,1:3", "--tee",
                        "0:2,1:0", "--", "sh", "-c", "echo out $RANK; echo err $RANK >&2"});
  INFO(mapped.out << mapped.err);
  REQUIRE(mapped.exit_code == 0);
  CHECK_THAT(mapped.out, !Contains("out "));
  CHECK(count_lines(mapped.err, "[rank 0] err 0") == 1);
  CHECK_THAT(mapped.err, !Contains("err 1"));
  auto kept = files(dir.file("mapped"));
  CHECK(kept == std::map<std::string, std::string>{{"RUN/attempt_0/0/stdout.log", "out 0\n"},
                                                   {"RUN/attempt_0/0/stderr.log", "err 0\n"},
                                                   {"RUN/attempt_0/1/stdout.log", "out 1\n"},
                                                   {"RUN/attempt_0/1/stderr.log", "err 1\n"}});
  // Redirecting stdout alone keeps stderr too (torchrun keeps only the streams named: `-r 1` lost
  // it, and a failed rank's "full logs" was an empty directory).
  auto failed = ddprun({"--log-dir", dir.file("failed"), "--nproc-per-node", "2", "-r", "1", "--", "sh", "-c",
                        "echo out $RANK; echo err $RANK >&2; exit $RANK"});
  INFO(failed.out << failed.err);
  CHECK(failed.exit_code == 1);
  CHECK(files(dir.file("failed")) == std::map<std::string, std::string>{{"RUN/attempt_0/0/stdout.log", "out 0\n"},
                                                                        {"RUN/attempt_0/0/stderr.log", "err 0\n"},
                                                                        {"RUN/attempt_0/1/stdout.log", "out 1\n"},
                                                                        {"RUN/attempt_0/1/stderr.log", "err 1\n"}});
  CHECK_THAT(failed.err, Contains("/attempt_0/1/"));
}

TEST_CASE("torchrun's options that mean nothing here are accepted with one line each", "[launch][torchrun]") {
  auto r = run_command({bin("ddprun"), "--standalone", "--start-method", "spawn", "--rdzv-conf",
                        "join_timeout=30,read_timeout=5", "--", "true"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(count_lines(r.err, "ddprun: --start-method is accepted for torchrun's sake and ignored: ddprun starts every "
                           "worker with fork and exec") == 1);
  CHECK(count_lines(r.err, "ddprun: --rdzv-conf read_timeout is ignored (only join_timeout and last_call_timeout mean something here)") == 1);
}

TEST_CASE("a torch.distributed script runs elastic as under torchrun: a node that joins, and one that leaves, "
          "start its next round afresh", "[launch][torchrun][python][elastic]") {
  if (!python_has_torch()) {
    WARN("skipped: " << kPython << " has no torch (Debian's python3-torch): no script to run");
    return;
  }
  // env:// keys its store space by TORCHELASTIC_RESTART_COUNT: a round that reused the last one's
  // read its Gloo addresses (the joiner failed in init_process_group) or waited forever on its
  // barrier's count (the node left alone).
  TempDir dir;
  write_file(dir.file("el.py"), R"PY(import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group('gloo')
for i in range(int(sys.argv[1])):
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(0.1)
print('done round', os.environ['DDPRUN_ROUND'], 'restart count', os.environ['TORCHELASTIC_RESTART_COUNT'],
      'world', dist.get_world_size(), 'sum', int(t.item()), flush=True)
dist.destroy_process_group()
)PY");
  auto node = [&](int port, const std::string& name, const std::string& settle) {
    return "DDPRUN_PYTHON=" + std::string(kPython) + " DDPRUN_RDZV_SECRET=s3cret timeout 100 " + bin("ddprun") +
           " --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
           " --rdzv-settle " + settle + " --node-timeout 3 --local-addr " + name + " " + dir.file("el.py") + " 60 > " +
           dir.file(name + std::to_string(port) + ".log") + " 2>&1";
  };
  SECTION("joins") {
    const int port = free_port();
    // b joins once a's round 0 runs, and a's worker takes 6 s more.
    auto r = run_shell(node(port, "a", "1") + " & A=$!; " +
                           until_logged(dir.file("a" + std::to_string(port) + ".log"), "rendezvous round 0", 30) +
                           node(port, "b", "1") + " & B=$!; wait $A; SA=$?; wait $B; echo statuses=$SA,$?",
                       std::chrono::seconds(150));
    std::string a = read_file(dir.file("a" + std::to_string(port) + ".log")),
                b = read_file(dir.file("b" + std::to_string(port) + ".log"));
    INFO(r.out << r.err << "\n--- a:\n" << a << "\n--- b:\n" << b);
    CHECK_THAT(r.out, Contains("statuses=0,0"));
    CHECK_THAT(a, Contains("rendezvous round 1: node rank 0 of 2 (a, b), world size 2"));
    CHECK_THAT(a, Contains("done round 1 restart count 1 world 2 sum 2"));
    CHECK_THAT(b, Contains("done round 1 restart count 1 world 2 sum 2"));
  }
  SECTION("leaves") {
    const int port = free_port();
    // a first, so that it hosts the store and b's leaving is a node's, not the store host's.
    const std::string a_log = dir.file("a" + std::to_string(port) + ".log");
    auto r = run_shell(node(port, "a", "3") + " & A=$!; sleep 1; " + node(port, "b", "3") + " & B=$!; " +
                           until_logged(dir.file("b" + std::to_string(port) + ".log"), "round 0: node rank", 30) +
                           "sleep 3; kill -TERM $B; "
                           "wait $A; SA=$?; wait $B; echo statuses=$SA,$?",
                       std::chrono::seconds(150));
    std::string a = read_file(a_log);
    INFO(r.out << r.err << "\n--- a:\n" << a);
    CHECK_THAT(r.out, Contains("statuses=0,143"));
    CHECK_THAT(a, Contains("rendezvous round 1: node rank 0 of 1 (a), world size 1"));
    CHECK_THAT(a, Contains("done round 1 restart count 1 world 1 sum 1"));
  }
}

}  // namespace DDP_TEST_FILE
