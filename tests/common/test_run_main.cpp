// Every program's exit ladder: the exception a run ends with, its one line on stderr and its status.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>

#include "ddp/common/error.h"
#include "ddp/common/run_main.h"
#include "ddp/common/worker_contract.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

namespace {

struct Outcome {
  int status;
  std::string err;
};

// Runs run_main with stderr sent to a file, and reads the file back.
Outcome run(const ProgramErrors& errors, const std::function<int()>& body) {
  test::TempDir dir;
  std::fflush(stderr);
  int saved = dup(STDERR_FILENO);
  std::FILE* file = std::fopen(dir.file("err").c_str(), "w");
  REQUIRE(file);
  dup2(fileno(file), STDERR_FILENO);
  int status = run_main(errors, body);
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::fclose(file);
  return {status, test::read_file(dir.file("err"))};
}

}  // namespace

TEST_CASE("run_main maps each exception to its status and one line", "[common][errors]") {
  ProgramErrors errors;
  errors.program = "ddprun";
  auto ok = run(errors, [] { return 3; });
  CHECK(ok.status == 3);
  CHECK(ok.err.empty());
  auto usage = run(errors, []() -> int { throw ConfigError("train.epochs: must be >= 1, got 0"); });
  CHECK(usage.status == kExitUsage);
  CHECK(usage.err == "ddprun: error: train.epochs: must be >= 1, got 0\n");
  auto io = run(errors, []() -> int { throw IoError("cannot write x: disk full"); });
  CHECK(io.status == kExitIoError);
  CHECK(io.err == "ddprun: I/O error: cannot write x: disk full\n");
  auto other = run(errors, []() -> int { throw std::runtime_error("boom\nException raised from f at x.cpp:1"); });
  CHECK(other.status == kExitFailure);
  CHECK(other.err == "ddprun: internal error: boom\n");  // without LibTorch's backtrace
  // Another rank's, rethrown here: said as out of memory, with the advice.
  auto memory = run(errors, []() -> int { throw OutOfMemory("rank 1: std::bad_alloc"); });
  CHECK(memory.status == kExitFailure);
  CHECK(memory.err.rfind("ddprun: out of memory: rank 1: std::bad_alloc; without dist.shard every rank holds", 0) == 0);
  // std::thread's words at a ulimit say nothing of it.
  auto thread = run(errors, []() -> int {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  CHECK(thread.status == kExitFailure);
  CHECK(thread.err ==
        "ddprun: out of resources: Resource temporarily unavailable: a thread could not be started, most likely as "
        "the process is at a limit on its tasks (ulimit -u, or a cgroup's pids.max: docker --pids-limit, systemd's "
        "TasksMax) or on its address space (ulimit -v or -d)\n");
}

TEST_CASE("run_main names the failure and the rank as the program asks", "[common][errors]") {
  int rank = 0;
  bool asked_to_leave = false;
  ProgramErrors errors;
  errors.program = "ddp-train";
  errors.failure = "failed";
  errors.prefix = [&] { return "rank " + std::to_string(rank) + ": "; };
  errors.exit_at_once = [&] { return asked_to_leave = true, false; };  // never _Exit in a test
  auto usage = run(errors, [&]() -> int {
    rank = 2;  // known only once the body has read the environment
    throw UserError("bad");
  });
  CHECK(usage.err == "ddp-train: rank 2: error: bad\n");
  CHECK(asked_to_leave);
  auto other = run(errors, []() -> int { throw std::logic_error("odd"); });
  CHECK(other.status == kExitFailure);
  CHECK(other.err == "ddp-train: rank 2: failed: odd\n");
}

}  // namespace DDP_TEST_FILE
