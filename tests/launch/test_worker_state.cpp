// The supervisor's state machine, without processes: each exit a worker can make, and each way an
// attempt can end.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>

#include "ddp/launch/worker_state.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

namespace {

// waitpid statuses, built the way the kernel reports them.
int exited(int code) { return (code & 0xff) << 8; }
int killed(int sig) { return sig & 0x7f; }

}  // namespace

TEST_CASE("the wait-status helpers build what waitpid reports", "[launch][state]") {
  CHECK(WIFEXITED(exited(3)));
  CHECK(WEXITSTATUS(exited(3)) == 3);
  CHECK(WIFSIGNALED(killed(SIGKILL)));
  CHECK(WTERMSIG(killed(SIGKILL)) == SIGKILL);
}

TEST_CASE("a healthy worker's exit moves it to SUCCEEDED, FAILED or STOPPED", "[launch][state]") {
  CHECK(state_after_exit(exited(0), false) == WorkerState::kSucceeded);
  CHECK(state_after_exit(exited(0), true) == WorkerState::kSucceeded);  // finished before the stop reached it
  CHECK(state_after_exit(exited(1), false) == WorkerState::kFailed);
  CHECK(state_after_exit(exited(2), false) == WorkerState::kFailed);
  CHECK(state_after_exit(killed(SIGSEGV), false) == WorkerState::kFailed);
  CHECK(state_after_exit(exited(143), false) == WorkerState::kFailed);  // stopped by someone else
  // Once the group is being stopped, a worker that then dies was stopped, not failed.
  CHECK(state_after_exit(exited(143), true) == WorkerState::kStopped);
  CHECK(state_after_exit(killed(SIGKILL), true) == WorkerState::kStopped);
  CHECK(state_after_exit(exited(1), true) == WorkerState::kStopped);
}

TEST_CASE("only a usage error is not worth a restart", "[launch][state]") {
  CHECK_FALSE(restartable_failure(exited(2)));
  CHECK(restartable_failure(exited(1)));
  CHECK(restartable_failure(exited(3)));
  CHECK(restartable_failure(killed(SIGKILL)));
  CHECK(restartable_failure(killed(2)));  // SIGINT is signal 2, not exit status 2
}

TEST_CASE("a worker that a stop signal ended, or that exited 128 + one, was stopped as asked", "[launch][state]") {
  CHECK(stop_signal_of(exited(143)) == SIGTERM);  // ddp-train, stopped with a checkpoint
  CHECK(stop_signal_of(exited(130)) == SIGINT);
  CHECK(stop_signal_of(exited(128 + SIGUSR1)) == SIGUSR1);
  CHECK(stop_signal_of(killed(SIGTERM)) == SIGTERM);  // a program with no handler
  CHECK(stop_signal_of(killed(SIGHUP)) == SIGHUP);
  CHECK(stop_signal_of(killed(SIGKILL)) == 0);  // the OOM killer's, or a crash's: a failure
  CHECK(stop_signal_of(killed(SIGSEGV)) == 0);
  CHECK(stop_signal_of(exited(137)) == 0);
  CHECK(stop_signal_of(exited(1)) == 0);
  CHECK(stop_signal_of(exited(2)) == 0);
  CHECK(stop_signal_of(exited(0)) == 0);
}

TEST_CASE("after an attempt: finish, restart while restarts are left, then give up", "[launch][state]") {
  CHECK(decide_after_attempt(0, false, 0, 3) == AttemptDecision::kFinish);
  CHECK(decide_after_attempt(0, true, 0, 3) == AttemptDecision::kFinish);
  CHECK(decide_after_attempt(2, false, 0, 3) == AttemptDecision::kFinish);    // usage error
  CHECK(decide_after_attempt(130, false, 0, 3) == AttemptDecision::kFinish);  // interrupted
  CHECK(decide_after_attempt(1, true, 0, 0) == AttemptDecision::kFinish);     // no restarts asked for
  CHECK(decide_after_attempt(1, true, 0, 2) == AttemptDecision::kRestart);
  CHECK(decide_after_attempt(137, true, 1, 2) == AttemptDecision::kRestart);
  CHECK(decide_after_attempt(1, true, 2, 2) == AttemptDecision::kGiveUp);
}

}  // namespace DDP_TEST_FILE
