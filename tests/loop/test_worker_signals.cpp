// The worker's side of worker_contract.h's StopReason: a stop signal queued with a reason is read
// as that reason, a plain one as kAsked, and the first stop's reason stands. Each case runs in a
// child process, whose signal handlers and stop state are its own.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "ddp/common/worker_contract.h"
#include "ddp/loop/worker_signals.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

// Runs `body` in a child that has installed the stop handlers; its exit code (0: every expectation held).
int in_child(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    ddp::install_stop_handlers();
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void queue_to_self(int signal, ddp::StopReason reason) {
  union sigval value {};
  value.sival_int = static_cast<int>(reason);
  sigqueue(getpid(), signal, value);
}

}  // namespace

TEST_CASE("a stop signal carries the launcher's reason, a plain one is a stop as asked, and the first signal and reason stand",
          "[signals][contract]") {
  using ddp::StopReason;
  // Signals sent to oneself are delivered before kill()/sigqueue() returns.
  CHECK(in_child([] {
          if (ddp::stop_signal() != 0) return 1;
          queue_to_self(SIGTERM, StopReason::kMembershipChanged);
          if (ddp::stop_signal() != SIGTERM) return 2;
          if (ddp::stop_reason() != StopReason::kMembershipChanged) return 3;
          kill(getpid(), SIGTERM);  // the launcher's signal to the group that follows
          queue_to_self(SIGINT, StopReason::kPeerFailed);
          if (ddp::stop_signal() != SIGTERM) return 4;
          return ddp::stop_reason() == StopReason::kMembershipChanged ? 0 : 5;
        }) == 0);
  CHECK(in_child([] {
          // A plain signal first: the signal stands, and a queued reason after it is still taken, since
          // the launcher's plain signal can reach another thread's handler before its queued one.
          kill(getpid(), SIGINT);
          queue_to_self(SIGTERM, StopReason::kPeerInterrupted);
          if (ddp::stop_signal() != SIGINT) return 1;
          return ddp::stop_reason() == StopReason::kPeerInterrupted ? 0 : 2;
        }) == 0);
  CHECK(in_child([] {
          queue_to_self(SIGHUP, static_cast<StopReason>(99));  // a value no launcher sends
          return ddp::stop_signal() == SIGHUP && ddp::stop_reason() == StopReason::kAsked ? 0 : 1;
        }) == 0);
}

}  // namespace DDP_TEST_FILE
