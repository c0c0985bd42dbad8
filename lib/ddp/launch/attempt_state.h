#pragma once
// Note [Attempt states]: how one attempt of the node's workers ends, as an explicit state machine.
// An attempt (attempt.cpp) watches processes, signals and the store and turns what it sees
// into events; this class decides, and returns what to do. No processes, no store: the transitions
// are tested alone (tests/launch/test_attempt_state.cpp).
//
//   RUNNING  ── a worker failed (static job), a stall ──────────▶ STOPPING (failed; told to the other nodes)
//   RUNNING  ── a worker stopped as asked (static job) ─────────▶ STOPPING (stopped; told as an interruption)
//   RUNNING  ── a failure reported by another node ─────────────▶ STOPPING (failed)
//   RUNNING  ── a worker failed or stopped as asked (elastic) ──▶ HOLDING  (Note [Failure or membership change])
//   HOLDING  ── --node-timeout passed with no membership change ─▶ STOPPING (failed; told to the other nodes)
//   RUNNING, HOLDING ── a membership change (elastic) ──────────▶ STOPPING (membership changed; no failure)
//   any      ── the first signal ─────────────────────────────────▶ STOPPING (interrupted; elastic SIGTERM/SIGHUP:
//   leaving) STOPPING (interrupted, leaving) ── another signal ──────────▶ the same, and SIGKILL now any      ── the
//   launcher itself was frozen (elastic) ────────▶ STOPPING (frozen: this node leaves)
//
// Every transition into STOPPING asks the workers to stop (SIGTERM, or the signal received; SIGKILL
// after the grace). The attempt is over once every worker exited and nothing is held; outcome() then
// says how it ended. A signal decides the exit status whatever else happened: the user asked.

#include <chrono>
#include <optional>
#include <string>

#include "ddp/common/worker_contract.h"
#include "ddp/launch/elastic_rendezvous.h"
#include "ddp/launch/rendezvous.h"

namespace ddp {

/// The first thing that went wrong in an attempt; decides the summary and the exit status.
struct Failure {
  int exit_code = 1;
  std::optional<int> worker;  ///< local index, when one of this node's workers failed
  std::string description;
  bool restartable = true;
  bool interrupted = false;  ///< a worker, or another node, was asked to stop: this node stopped, it did not fail
};

/// How an attempt ended.
struct AttemptOutcome {
  int status = 0;
  bool restartable = false;  ///< a failure a restart may cure (not an interrupt)
  std::string cause;
  std::optional<MembershipChange> membership;  ///< elastic: the round ended because nodes changed
  bool left = false;                           ///< elastic: this node left the job
};

/// What the supervisor does after an event, in this order.
struct AttemptActions {
  std::string say;                      ///< a line for the console; empty for none
  std::optional<std::string> leave;     ///< elastic: announce that this node leaves, for this reason
  std::optional<RemoteFailure> report;  ///< tell the other nodes
  bool kill_now = false;                ///< SIGKILL every live worker's process group now
  int stop_signal = 0;                  ///< ask every live worker's group to stop with it; SIGKILL after the grace
  StopReason stop_reason = StopReason::kAsked;  ///< told to each worker with the signal
};

/// Which kind of job the node is in: who else hears of a failure, and whether failures are held.
enum class JobKind { kSingleNode, kMultiNode, kElastic };

class AttemptState {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Phase { kRunning, kHolding, kStopping };
  enum class Cause { kNone, kFailed, kInterrupted, kLeaving, kMembershipChanged, kFrozen };

  /// `node` names this node in what the others are told, e.g. "node 1 (host-b)"; `hold_for` is how
  /// long an elastic job holds a failure (--node-timeout and a margin).
  AttemptState(JobKind kind, std::string node, Clock::duration hold_for)
      : kind_(kind), node_(std::move(node)), hold_for_(hold_for) {}

  Phase phase() const { return phase_; }
  Cause cause() const { return cause_; }
  /// Whether the workers are being stopped (or a failure is held): a worker that exits now is STOPPED.
  bool stopping() const { return phase_ != Phase::kRunning; }
  /// Elastic: whether the node still beats and looks for membership changes.
  bool watches_membership() const;
  bool holding() const { return phase_ == Phase::kHolding; }
  bool hold_expired(Clock::time_point now) const { return holding() && now >= hold_until_; }
  bool frozen() const { return cause_ == Cause::kFrozen; }

  /// A worker exited with a failure while RUNNING.
  AttemptActions on_worker_failed(const Failure& failure, Clock::time_point now);
  /// A worker exited with a usage error (exit 2) after the attempt began to stop. Such an error
  /// outranks the failure that started the stop when that one is restartable: it is its likely cause
  /// (a rank that stops on a config error closes its connections, and a peer then fails on them
  /// first), and a restart would only repeat it (Note [A usage error outranks its echoes]).
  AttemptActions on_usage_error_while_stopping(const Failure& failure);
  /// The monitor found a rank that made no progress; `failure` says which and for how long.
  AttemptActions on_stall(const Failure& failure);
  /// Another node reported a failure.
  AttemptActions on_remote_failure(const RemoteFailure& remote);
  /// The held failure's time ran out with no membership change to explain it.
  AttemptActions on_hold_expired();
  /// Elastic: the round ends because nodes changed; `round` is this attempt's.
  AttemptActions on_membership_change(const MembershipChange& change, int round);
  /// The launcher received `sig` (not SIGCHLD); `live_workers` are still running. A second signal
  /// kills them at once (one request sent twice arrives once: Note [One request, sent twice]).
  AttemptActions on_signal(int sig, int live_workers);
  /// Elastic: the launcher did not run for longer than the others wait; `what` says for how long.
  AttemptActions on_frozen(const std::string& what);

  /// The failure that ends the attempt, when one does (for the summary); null otherwise.
  const Failure* failure() const { return cause_ == Cause::kFailed && !signal_ ? &failure_ : nullptr; }
  /// How the attempt ended; meaningful once every worker exited and nothing is held.
  AttemptOutcome outcome() const;

 private:
  bool multi_node() const { return kind_ != JobKind::kSingleNode; }
  /// RUNNING or HOLDING → STOPPING for `cause`; the held failure, if any, is dropped (explained).
  void stop_for(Cause cause);

  JobKind kind_;
  std::string node_;
  Clock::duration hold_for_;
  Phase phase_ = Phase::kRunning;
  Cause cause_ = Cause::kNone;
  Failure failure_;              // kFailed, kFrozen, and the one HOLDING holds
  MembershipChange change_;      // kMembershipChanged
  int signal_ = 0;               // the first signal received; it decides the exit status
  Clock::time_point hold_until_;
};

}  // namespace ddp
