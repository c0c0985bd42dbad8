#pragma once
// Supervision as a state machine (torch elastic's): each worker goes HEALTHY → SUCCEEDED | FAILED |
// STOPPED, and each attempt ends in finishing, restarting or giving up. Elastic's INIT (waiting for
// the rendezvous) is the launcher's own phase here: a worker exists only once it is spawned. The decisions are
// pure functions of what was observed, so they are tested without processes.

namespace ddp {

/// A worker's life.
enum class WorkerState { kHealthy, kSucceeded, kFailed, kStopped };

/// The state a HEALTHY worker enters when it exits with waitpid status `wait_status`: SUCCEEDED on
/// exit 0; otherwise STOPPED if the launcher was already stopping the group, else FAILED.
WorkerState state_after_exit(int wait_status, bool group_stopping);

/// Whether a restart may cure a failure with this status: any but a usage error (exit 2), which
/// a restart would only repeat.
bool restartable_failure(int wait_status);

/// Whether a worker that exited with `wait_status` was stopped by a stop signal (SIGTERM, SIGINT,
/// SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2): killed by one, or exited 128 + it as ddp-train does once it
/// has stopped. Sent to a worker rather than to the launcher, such a signal is a stop request
/// (docs/faults.md), which no restart answers; 0 when it was none.
int stop_signal_of(int wait_status);

/// What the launcher does when an attempt has ended.
enum class AttemptDecision {
  kFinish,   ///< success, or a failure no restart can cure: exit with the attempt's status
  kRestart,  ///< a restartable failure with restarts left
  kGiveUp,   ///< a restartable failure, but the --max-restarts are used up
};

/// The decision after attempt `attempt` (0-based) ended with exit `status`.
AttemptDecision decide_after_attempt(int status, bool restartable, int attempt, int max_restarts);

}  // namespace ddp
