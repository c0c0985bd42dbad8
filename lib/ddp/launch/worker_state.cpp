#include "ddp/launch/worker_state.h"

#include <signal.h>
#include <sys/wait.h>

#include "ddp/common/worker_contract.h"

namespace ddp {

WorkerState state_after_exit(int wait_status, bool group_stopping) {
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kExitSuccess) return WorkerState::kSucceeded;
  return group_stopping ? WorkerState::kStopped : WorkerState::kFailed;
}

bool restartable_failure(int wait_status) {
  return !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kExitUsage);
}

int stop_signal_of(int wait_status) {
  const int sig = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) > 128 ? WEXITSTATUS(wait_status) - 128
                  : WIFSIGNALED(wait_status)                               ? WTERMSIG(wait_status)
                                                                           : 0;
  for (int stop : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2})
    if (sig == stop) return sig;
  return 0;
}

AttemptDecision decide_after_attempt(int status, bool restartable, int attempt, int max_restarts) {
  if (status == kExitSuccess || !restartable) return AttemptDecision::kFinish;
  if (attempt < max_restarts) return AttemptDecision::kRestart;
  return max_restarts > 0 ? AttemptDecision::kGiveUp : AttemptDecision::kFinish;
}

}  // namespace ddp
