#pragma once
// How a launch's nodes meet before each attempt and part after it: one node alone, a fixed group,
// or elastic rounds. See Note [Job states] below.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ddp/launch/attempt_state.h"
#include "ddp/launch/elastic_rendezvous.h"
#include "ddp/launch/launch_options.h"
#include "ddp/launch/rendezvous.h"
#include "ddp/launch/signals.h"
#include "ddp/launch/worker_state.h"

namespace ddp {

// Note [Job states]: the launcher's life is the same loop for every kind of job,
//   MEET ──▶ RUN (an Attempt, Note [Attempt states]) ──▶ SETTLE ──▶ FINISH
//    ▲                                                     │
//    └──────── RESTART (a failure a restart may cure) ◀────┤
//    └──────── MEET AGAIN (elastic: nodes changed; counts for nothing) ◀─┘
// What differs is how the nodes meet and part, a JobMembership: one node alone (a private store),
// a fixed group of nodes (Rendezvous), or elastic rounds (ElasticRendezvous). A signal while no
// attempt runs ends the launch in MEET.

/// What one attempt runs with: the layout the nodes agreed, the options as it sees them, and its numbers.
struct AttemptPlan {
  LaunchOptions options;
  WorldLayout layout;
  int attempt = 0;          // names its logs and store keys; elastic: the round
  int failures_before = 0;  // failures counted against --max-restarts before it
};

/// Signals that arrive while no attempt runs: any but SIGCHLD ends the launch.
class BetweenAttempts {
 public:
  explicit BetweenAttempts(SignalPipe& pipe) : pipe_(pipe) {}
  bool signalled() {
    for (int sig : pipe_.take())
      if (sig != SIGCHLD && !first_) first_ = sig;
    return first_ != 0;
  }
  std::function<bool()> check() {
    return [this] { return signalled(); };
  }
  int signal() const { return first_; }

 private:
  SignalPipe& pipe_;
  int first_ = 0;
};

/// What SETTLE decides about an attempt that ended.
enum class Settled { kDecide, kMeetAgain, kExit };

/// How a job's nodes meet before each attempt and part after it. See Note [Job states].
class JobMembership {
 public:
  virtual ~JobMembership() = default;
  /// MEET: the next attempt's plan, agreed with the other nodes; nullopt when this node starts none,
  /// `exit_status` then saying how the launch ends.
  virtual std::optional<AttemptPlan> meet(int attempt, BetweenAttempts& signals, int& exit_status) = 0;
  /// SETTLE: whether the outcome is for the restart decision, a new meeting, or the end (`exit_status`).
  virtual Settled settle(const AttemptPlan&, AttemptOutcome&, BetweenAttempts&, int& /*exit_status*/) {
    return Settled::kDecide;
  }
  /// FINISH: says a give-up and tells the other nodes.
  virtual void finish(const AttemptPlan& plan, const AttemptOutcome& outcome, AttemptDecision decision,
                      BetweenAttempts& signals) = 0;
  /// RESTART: the line that says so.
  virtual std::string restarting(const AttemptPlan& plan, const AttemptOutcome& outcome) const = 0;
  virtual Rendezvous* rendezvous() = 0;
  virtual ElasticRendezvous* elastic() { return nullptr; }
};

/// One node with a private store (`rendezvous` null), or a fixed group of nodes: attempt N is
/// restart N, and the nodes meet at a barrier before each restart.
std::unique_ptr<JobMembership> static_job(LaunchOptions options, WorldLayout layout,
                                          std::unique_ptr<Rendezvous> rendezvous);

/// An elastic job (--nnodes MIN:MAX): rounds until the workers finish, a failure is not restarted,
/// or this node leaves. See Note [Elastic rounds].
std::unique_ptr<JobMembership> elastic_job(LaunchOptions options);

}  // namespace ddp
