#include "ddp/launch/attempt_state.h"

#include <signal.h>

#include "ddp/common/worker_contract.h"
#include "ddp/launch/process.h"

namespace ddp {

bool AttemptState::watches_membership() const {
  return kind_ == JobKind::kElastic && (cause_ == Cause::kNone || cause_ == Cause::kInterrupted);
}

void AttemptState::stop_for(Cause cause) {
  phase_ = Phase::kStopping;
  cause_ = cause;
}

AttemptActions AttemptState::on_worker_failed(const Failure& failure, Clock::time_point now) {
  AttemptActions actions;
  actions.stop_signal = SIGTERM;
  // A worker stopped as asked: its ranks have voted to stop with it, and say so.
  actions.stop_reason = failure.interrupted ? StopReason::kAsked : StopReason::kPeerFailed;
  failure_ = failure;
  // A usage error is no echo of a lost node: it is told at once, so that other nodes whose ranks
  // fail after it (on the connections it closed) end on it too, rather than restart. A worker
  // stopped as asked is held like a failure: when a round ends elsewhere (a node joins, or one
  // drained leaves), the ranks here stop at the agreed step and exit 143 before this launcher has
  // seen the change, which then explains it.
  const bool usage_error = failure.exit_code == kExitUsage && !failure.restartable;
  if (kind_ == JobKind::kElastic && !usage_error) {
    // Note [Failure or membership change]: when a node is lost, its peers' workers fail at once
    // (their connections to it reset), seconds before its silence is noticed. The failure is held
    // for --node-timeout: a membership change meanwhile explains it, and it counts for nothing.
    phase_ = Phase::kHolding;
    hold_until_ = now + hold_for_;
    return actions;
  }
  stop_for(Cause::kFailed);
  if (multi_node())
    actions.report = RemoteFailure{failure.exit_code, failure.description, failure.restartable, failure.interrupted};
  return actions;
}

// Note [A usage error outranks its echoes]: rank 0 finds run.output_dir blocked and exits 2; its
// sockets close while it exits, and rank 1, in a collective with it, fails on the closed
// connection. Which of the two the launcher reaps first is a race (CI saw rank 1 first, and the
// job restarted a config error). The usage error is kept whichever comes first: it is the cause,
// and it decides the exit status (2) and that there is no restart. Only this node's outcome
// changes; what was told to other nodes stands, first report wins (Rendezvous::report_failure).
AttemptActions AttemptState::on_usage_error_while_stopping(const Failure& failure) {
  AttemptActions actions;
  if (cause_ != Cause::kFailed && phase_ != Phase::kHolding) return actions;  // interrupted, left, nodes changed
  if (!failure_.restartable || failure_.interrupted) return actions;
  failure_ = failure;
  failure_.restartable = false;
  if (phase_ == Phase::kHolding) {  // elastic: a usage error is held no longer, and told (on_worker_failed)
    stop_for(Cause::kFailed);
    actions.report = RemoteFailure{failure_.exit_code, failure_.description, false};
  }
  return actions;
}

AttemptActions AttemptState::on_stall(const Failure& failure) {
  failure_ = failure;
  stop_for(Cause::kFailed);
  AttemptActions actions;
  actions.say = failure.description + "; stopping the group";
  if (multi_node()) actions.report = RemoteFailure{failure.exit_code, failure.description, failure.restartable};
  actions.stop_signal = SIGTERM;
  actions.stop_reason = StopReason::kPeerFailed;
  return actions;
}

AttemptActions AttemptState::on_remote_failure(const RemoteFailure& remote) {
  // Holding a usage error of its own, a node keeps it against another's restartable echo of it.
  if (phase_ == Phase::kHolding && !failure_.restartable && remote.restartable) {
    stop_for(Cause::kFailed);
    AttemptActions actions;
    actions.report = RemoteFailure{failure_.exit_code, failure_.description, false};
    return actions;
  }
  // A node interrupted by a signal says so (on_signal): its exit code alone cannot tell, since a
  // worker killed by a signal after the last restart gives the same 128 + N, not restartable.
  const bool interrupted = remote.interrupted;
  failure_ = Failure{remote.exit_code, std::nullopt, remote.description, remote.restartable && !interrupted,
                     interrupted};
  stop_for(Cause::kFailed);
  AttemptActions actions;
  actions.say = "stopping this node's workers: " + remote.description;
  actions.stop_signal = SIGTERM;
  actions.stop_reason = interrupted ? StopReason::kPeerInterrupted : StopReason::kPeerFailed;
  return actions;
}

AttemptActions AttemptState::on_hold_expired() {
  stop_for(Cause::kFailed);  // the workers are being stopped already
  AttemptActions actions;
  actions.report = RemoteFailure{failure_.exit_code, failure_.description, failure_.restartable, failure_.interrupted};
  return actions;
}

AttemptActions AttemptState::on_membership_change(const MembershipChange& change, int round) {
  change_ = change;
  stop_for(Cause::kMembershipChanged);
  AttemptActions actions;
  actions.say = "round " + std::to_string(round) + " ends: " + change.description + "; stopping this node's workers";
  actions.stop_signal = SIGTERM;
  actions.stop_reason = StopReason::kMembershipChanged;
  return actions;
}

AttemptActions AttemptState::on_signal(int sig, int live_workers) {
  AttemptActions actions;
  if (signal_) {
    actions.kill_now = true;  // a second Ctrl-C: no more grace
    return actions;
  }
  signal_ = sig;
  if (kind_ == JobKind::kElastic && (sig == SIGTERM || sig == SIGHUP)) {
    // A node drained by its scheduler leaves; the others go on in a new round without it. A
    // frozen launcher is leaving already, and stays frozen: it is found frozen once.
    stop_for(frozen() ? Cause::kFrozen : Cause::kLeaving);
    actions.say = "received " + signal_name(sig) + ": this node leaves the job; its workers checkpoint and stop";
    actions.leave = "received " + signal_name(sig);
    actions.stop_signal = SIGTERM;
    // Its workers' round ends as the others' does: the job may go on without them.
    actions.stop_reason = StopReason::kMembershipChanged;
    return actions;
  }
  stop_for(cause_ == Cause::kNone ? Cause::kInterrupted : cause_);
  actions.say = "received " + signal_name(sig) + "; stopping " + std::to_string(live_workers) + " worker(s)";
  if (multi_node())
    actions.report = RemoteFailure{128 + sig, node_ + " was interrupted by " + signal_name(sig), false, true};
  // A hangup (the terminal or ssh session gone) is a stop request, as SIGTERM: the workers
  // checkpoint and leave, rather than die of SIGHUP's default action with their progress.
  actions.stop_signal = sig == SIGHUP ? SIGTERM : sig;
  return actions;
}

AttemptActions AttemptState::on_frozen(const std::string& what) {
  if (frozen()) return {};
  failure_ = Failure{kExitFailure, std::nullopt, what, false};
  stop_for(Cause::kFrozen);
  AttemptActions actions;
  actions.say = what + "; stopping this node's workers";
  actions.stop_signal = SIGTERM;
  return actions;
}

AttemptOutcome AttemptState::outcome() const {
  const bool left = cause_ == Cause::kLeaving || cause_ == Cause::kFrozen;
  if (signal_) return {128 + signal_, false, "interrupted by " + signal_name(signal_), std::nullopt, left};
  switch (cause_) {
    case Cause::kMembershipChanged:
      return {0, false, change_.description, change_, false};
    case Cause::kFrozen:
      return {failure_.exit_code, false, failure_.description, std::nullopt, true};
    case Cause::kFailed:
      return {failure_.exit_code, failure_.restartable, failure_.description, std::nullopt, false};
    default:
      return {};
  }
}

}  // namespace ddp
