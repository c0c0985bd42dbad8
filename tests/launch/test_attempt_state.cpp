// Note [Attempt states], without processes: every transition of one attempt, what it asks the
// supervisor to do, and how the attempt ends.
#include <catch2/catch.hpp>

#include <signal.h>

#include "ddp/launch/attempt_state.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Phase = AttemptState::Phase;
using Cause = AttemptState::Cause;

namespace {

using Clock = AttemptState::Clock;
constexpr auto kHold = std::chrono::seconds(8);

AttemptState machine(JobKind kind) { return AttemptState(kind, "node 1 (host-b)", kHold); }
Failure worker_failure(int exit_code = 7, bool restartable = true) {
  return Failure{exit_code, 0, "rank 3 on host-b: exit code " + std::to_string(exit_code), restartable};
}
MembershipChange lost_node() { return {MembershipChange::Kind::kLost, "node 2 (host-c) was lost: no heartbeat for 5 s"}; }

}  // namespace

TEST_CASE("an attempt nobody disturbs ends with status 0", "[launch][state]") {
  auto state = machine(JobKind::kMultiNode);
  CHECK(state.phase() == Phase::kRunning);
  CHECK_FALSE(state.stopping());
  auto end = state.outcome();
  CHECK(end.status == 0);
  CHECK_FALSE(end.restartable);
  CHECK_FALSE(end.membership);
  CHECK_FALSE(end.left);
  CHECK(state.failure() == nullptr);
}

TEST_CASE("a worker's failure stops the group at once and, with other nodes, tells them", "[launch][state]") {
  for (auto kind : {JobKind::kSingleNode, JobKind::kMultiNode}) {
    auto state = machine(kind);
    auto actions = state.on_worker_failed(worker_failure(), Clock::now());
    CHECK(actions.stop_signal == SIGTERM);
    CHECK_FALSE(actions.kill_now);
    CHECK(actions.report.has_value() == (kind == JobKind::kMultiNode));
    if (actions.report) {
      CHECK(actions.report->exit_code == 7);
      CHECK(actions.report->restartable);
    }
    CHECK(state.phase() == Phase::kStopping);
    CHECK(state.cause() == Cause::kFailed);
    REQUIRE(state.failure() != nullptr);
    CHECK(state.failure()->worker == 0);
    auto end = state.outcome();
    CHECK(end.status == 7);
    CHECK(end.restartable);
    CHECK(end.cause == "rank 3 on host-b: exit code 7");
  }
}

TEST_CASE("a worker stopped as asked stops the group and the job, with no restart, and elastic holds it as a failure",
          "[launch][state]") {
  const Failure asked{143, 0,
                      "rank 3 on host-b: exit code 143: a worker was asked to stop (SIGTERM), and its ranks "
                      "stopped",
                      false, true};
  for (auto kind : {JobKind::kSingleNode, JobKind::kMultiNode}) {
    auto state = machine(kind);
    auto actions = state.on_worker_failed(asked, Clock::now());
    CHECK(actions.stop_signal == SIGTERM);
    CHECK(actions.stop_reason == StopReason::kAsked);  // the ranks voted to stop with it, and say so
    CHECK(state.phase() == Phase::kStopping);
    if (actions.report) CHECK(actions.report->interrupted);
    CHECK(actions.report.has_value() == (kind == JobKind::kMultiNode));
    CHECK(state.outcome().status == 143);
    CHECK_FALSE(state.outcome().restartable);
  }
  // Elastic: ranks stop at the agreed step when a round ends on another node, before this launcher
  // sees the change; the hold lets the change explain their 143.
  auto explained = machine(JobKind::kElastic);
  explained.on_worker_failed(asked, Clock::now());
  CHECK(explained.phase() == Phase::kHolding);
  explained.on_membership_change(lost_node(), 3);
  CHECK(explained.outcome().status == 0);
  CHECK(explained.outcome().membership.has_value());
  // Unexplained, it ends the job as a stop, told to the others as one.
  auto alone = machine(JobKind::kElastic);
  alone.on_worker_failed(asked, Clock::now());
  auto expired = alone.on_hold_expired();
  REQUIRE(expired.report.has_value());
  CHECK(expired.report->interrupted);
  CHECK_FALSE(expired.report->restartable);
  CHECK(alone.outcome().status == 143);
  CHECK_FALSE(alone.outcome().restartable);
}

TEST_CASE("a usage error is a failure no restart cures", "[launch][state]") {
  auto state = machine(JobKind::kSingleNode);
  state.on_worker_failed(worker_failure(2, false), Clock::now());
  CHECK(state.outcome().status == 2);
  CHECK_FALSE(state.outcome().restartable);
}

TEST_CASE("a usage error that comes after the failure it caused is kept instead: exit 2, no restart",
          "[launch][state]") {
  Failure usage{2, 1, "rank 0 on host-b: exit code 2", false};
  SECTION("a peer's broken connection was reaped first") {
    auto state = machine(JobKind::kSingleNode);
    state.on_worker_failed(worker_failure(1), Clock::now());
    state.on_usage_error_while_stopping(usage);
    auto end = state.outcome();
    CHECK(end.status == 2);
    CHECK_FALSE(end.restartable);
    REQUIRE(state.failure() != nullptr);
    CHECK(state.failure()->worker == 1);  // the summary names the rank whose error it was
  }
  SECTION("elastic: while the failure is held, and once its hold runs out") {
    auto state = machine(JobKind::kElastic);
    state.on_worker_failed(worker_failure(1), Clock::now());
    state.on_usage_error_while_stopping(usage);
    auto actions = state.on_hold_expired();
    REQUIRE(actions.report);
    CHECK(actions.report->exit_code == 2);
    CHECK_FALSE(actions.report->restartable);
    CHECK(state.outcome().status == 2);
  }
  SECTION("the first failure that no restart cures stands") {
    auto state = machine(JobKind::kSingleNode);
    state.on_worker_failed(worker_failure(3, false), Clock::now());
    state.on_usage_error_while_stopping(usage);
    CHECK(state.outcome().status == 3);
  }
  SECTION("a signal, or a membership change, still decides") {
    auto interrupted = machine(JobKind::kSingleNode);
    interrupted.on_signal(SIGINT, 2);
    interrupted.on_usage_error_while_stopping(usage);
    CHECK(interrupted.outcome().status == 128 + SIGINT);
    auto changed = machine(JobKind::kElastic);
    changed.on_membership_change(lost_node(), 1);
    changed.on_usage_error_while_stopping(usage);
    CHECK(changed.outcome().status == 0);
    CHECK(changed.failure() == nullptr);
  }
}

TEST_CASE("a stall is said, told to the others and stops the group, and another node's failure stops it untold",
          "[launch][state]") {
  auto stalled = machine(JobKind::kMultiNode);
  auto actions = stalled.on_stall(Failure{1, std::nullopt, "rank 1 on host-b made no progress for 30 s", true});
  CHECK(actions.say == "rank 1 on host-b made no progress for 30 s; stopping the group");
  REQUIRE(actions.report);
  CHECK(actions.report->description == "rank 1 on host-b made no progress for 30 s");
  CHECK(actions.stop_signal == SIGTERM);
  CHECK(stalled.outcome().status == 1);
  CHECK(stalled.failure() != nullptr);

  auto told = machine(JobKind::kMultiNode);
  actions = told.on_remote_failure(RemoteFailure{9, "rank 0 on host-a: killed by SIGKILL", true});
  CHECK(actions.say == "stopping this node's workers: rank 0 on host-a: killed by SIGKILL");
  CHECK_FALSE(actions.report);  // it came from the others
  CHECK(actions.stop_signal == SIGTERM);
  CHECK(told.outcome().status == 9);
  CHECK(told.outcome().restartable);
  REQUIRE(told.failure() != nullptr);
  CHECK_FALSE(told.failure()->worker);  // none of ours: the summary names no local rank
  CHECK_FALSE(told.failure()->interrupted);
  CHECK(actions.stop_reason == ddp::StopReason::kPeerFailed);
}

TEST_CASE("another node's Ctrl-C stops this one as an interruption, not a failure, and its workers are told why",
          "[launch][state]") {
  auto node0 = machine(JobKind::kMultiNode);
  auto report = node0.on_signal(SIGINT, 2).report;
  REQUIRE(report);
  auto node1 = machine(JobKind::kMultiNode);
  auto actions = node1.on_remote_failure(*report);
  CHECK(actions.stop_reason == ddp::StopReason::kPeerInterrupted);
  CHECK(node1.outcome().status == 130);
  CHECK_FALSE(node1.outcome().restartable);
  REQUIRE(node1.failure() != nullptr);
  CHECK(node1.failure()->interrupted);  // summarized as "stopped: node 1 (host-b) was interrupted by SIGINT"
}

TEST_CASE("another node's worker killed by a signal, with no restart left, is a failure: the report says which, not "
          "the exit code", "[launch][state]") {
  auto node1 = machine(JobKind::kMultiNode);
  auto actions = node1.on_remote_failure(RemoteFailure{143, "rank 0 on host-a: killed by SIGTERM", false});
  CHECK(actions.stop_reason == ddp::StopReason::kPeerFailed);
  CHECK(node1.outcome().status == 143);
  CHECK_FALSE(node1.outcome().restartable);
  REQUIRE(node1.failure() != nullptr);
  CHECK_FALSE(node1.failure()->interrupted);  // summarized as "failed: rank 0 on host-a: killed by SIGTERM"
}

TEST_CASE("elastic: a worker's failure is held for the node timeout, then counts and is told", "[launch][state]") {
  auto state = machine(JobKind::kElastic);
  const auto t0 = Clock::now();
  auto actions = state.on_worker_failed(worker_failure(), t0);
  CHECK(actions.stop_signal == SIGTERM);  // its peers cannot go on either way
  CHECK_FALSE(actions.report);            // not yet: a membership change may explain it
  CHECK(state.phase() == Phase::kHolding);
  CHECK(state.stopping());
  CHECK(state.watches_membership());
  CHECK_FALSE(state.hold_expired(t0 + kHold - std::chrono::milliseconds(1)));
  REQUIRE(state.hold_expired(t0 + kHold));
  actions = state.on_hold_expired();
  REQUIRE(actions.report);
  CHECK(actions.report->exit_code == 7);
  CHECK(state.phase() == Phase::kStopping);
  CHECK_FALSE(state.holding());
  CHECK(state.outcome().status == 7);
  CHECK(state.outcome().restartable);
  CHECK_FALSE(state.watches_membership());
}

TEST_CASE("elastic: a membership change explains a held failure, which then counts for nothing", "[launch][state]") {
  auto state = machine(JobKind::kElastic);
  state.on_worker_failed(worker_failure(), Clock::now());
  auto actions = state.on_membership_change(lost_node(), 4);
  CHECK(actions.say == "round 4 ends: node 2 (host-c) was lost: no heartbeat for 5 s; stopping this node's workers");
  CHECK(actions.stop_signal == SIGTERM);
  CHECK(actions.stop_reason == ddp::StopReason::kMembershipChanged);
  CHECK_FALSE(state.holding());
  CHECK_FALSE(state.watches_membership());  // announced once
  auto end = state.outcome();
  CHECK(end.status == 0);
  REQUIRE(end.membership);
  CHECK(end.membership->kind == MembershipChange::Kind::kLost);
  CHECK(end.cause == lost_node().description);
  CHECK(state.failure() == nullptr);  // no failure summary
}

TEST_CASE("a signal stops the workers with it and decides the exit status", "[launch][state]") {
  SECTION("Ctrl-C on a multi-node job is told to the others as no restartable failure") {
    auto state = machine(JobKind::kMultiNode);
    auto actions = state.on_signal(SIGINT, 3);
    CHECK(actions.say == "received SIGINT; stopping 3 worker(s)");
    REQUIRE(actions.report);
    CHECK(actions.report->exit_code == 130);
    CHECK(actions.report->description == "node 1 (host-b) was interrupted by SIGINT");
    CHECK_FALSE(actions.report->restartable);
    CHECK(actions.stop_signal == SIGINT);
    CHECK(state.cause() == Cause::kInterrupted);
    CHECK(state.outcome().status == 130);
    CHECK_FALSE(state.outcome().restartable);
    CHECK_FALSE(state.outcome().left);
  }
  SECTION("a hangup asks the workers to stop as SIGTERM does, to checkpoint") {
    auto state = machine(JobKind::kSingleNode);
    auto actions = state.on_signal(SIGHUP, 2);
    CHECK(actions.stop_signal == SIGTERM);
    CHECK_FALSE(actions.report);
    CHECK(state.outcome().status == 128 + SIGHUP);
  }
  SECTION("Ctrl-\\ (SIGQUIT) is passed on, as torchrun does; ddp-train takes it as a stop request") {
    auto state = machine(JobKind::kSingleNode);
    auto actions = state.on_signal(SIGQUIT, 2);
    CHECK(actions.stop_signal == SIGQUIT);
    CHECK(state.outcome().status == 128 + SIGQUIT);
  }
  SECTION("a second signal kills at once") {
    auto state = machine(JobKind::kSingleNode);
    state.on_signal(SIGINT, 2);
    auto actions = state.on_signal(SIGINT, 2);
    CHECK(actions.kill_now);
    CHECK(actions.say.empty());
    CHECK(state.outcome().status == 130);
  }
  SECTION("during a failure's stop, the signal still decides the status, and no failure is summarised") {
    auto state = machine(JobKind::kSingleNode);
    state.on_worker_failed(worker_failure(), Clock::now());
    state.on_signal(SIGTERM, 1);
    CHECK(state.outcome().status == 128 + SIGTERM);
    CHECK_FALSE(state.outcome().restartable);
    CHECK(state.failure() == nullptr);
  }
}

TEST_CASE("elastic: SIGTERM or SIGHUP makes the node leave, and Ctrl-C does not", "[launch][state]") {
  for (int sig : {SIGTERM, SIGHUP}) {
    auto state = machine(JobKind::kElastic);
    state.on_worker_failed(worker_failure(), Clock::now());  // a held failure: the leave explains it
    auto actions = state.on_signal(sig, 2);
    REQUIRE(actions.leave);
    CHECK(*actions.leave == std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGHUP"));
    CHECK_FALSE(actions.report);
    CHECK(actions.stop_signal == SIGTERM);
    CHECK(actions.stop_reason == StopReason::kMembershipChanged);  // the job may go on without them
    CHECK(state.cause() == Cause::kLeaving);
    CHECK_FALSE(state.holding());
    CHECK_FALSE(state.watches_membership());
    CHECK(state.outcome().left);
    CHECK(state.outcome().status == 128 + sig);
  }
  auto interrupted = machine(JobKind::kElastic);
  auto actions = interrupted.on_signal(SIGINT, 2);
  CHECK_FALSE(actions.leave);
  CHECK(actions.report);
  CHECK(interrupted.watches_membership());  // it still beats while its workers stop
  interrupted.on_membership_change(lost_node(), 1);
  CHECK(interrupted.outcome().status == 130);  // the signal decides
  CHECK_FALSE(interrupted.outcome().left);
}

TEST_CASE("elastic: a launcher that was frozen leaves, once, whatever it was doing", "[launch][state]") {
  auto state = machine(JobKind::kElastic);
  state.on_worker_failed(worker_failure(), Clock::now());
  auto actions = state.on_frozen("this launcher did not run for 40 s");
  CHECK(actions.say == "this launcher did not run for 40 s; stopping this node's workers");
  CHECK(actions.stop_signal == SIGTERM);
  CHECK_FALSE(actions.report);  // the others went on without it
  CHECK(state.frozen());
  CHECK_FALSE(state.holding());
  CHECK_FALSE(state.watches_membership());
  CHECK(state.on_frozen("again").say.empty());
  state.on_signal(SIGTERM, 1);  // a leave after the freeze: still frozen, and found so once
  CHECK(state.frozen());
  CHECK(state.on_frozen("again").say.empty());
  auto end = state.outcome();
  CHECK(end.status == 128 + SIGTERM);  // the signal decides the status
  CHECK_FALSE(end.restartable);
  CHECK(end.left);

  auto unsignalled = machine(JobKind::kElastic);
  unsignalled.on_frozen("this launcher did not run for 40 s");
  end = unsignalled.outcome();
  CHECK(end.status == 1);
  CHECK_FALSE(end.restartable);
  CHECK(end.left);
  CHECK(end.cause == "this launcher did not run for 40 s");

  auto after_change = machine(JobKind::kElastic);
  after_change.on_membership_change(lost_node(), 2);
  after_change.on_frozen("this launcher did not run for 40 s");
  CHECK(after_change.outcome().left);
  CHECK_FALSE(after_change.outcome().membership);
}

}  // namespace DDP_TEST_FILE
