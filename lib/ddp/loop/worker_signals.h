#pragma once
// What a worker hears from its launcher: SIGTERM/SIGINT/SIGHUP asking it to stop (preemption), and the
// heartbeat pipe through which it shows it is making progress.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "ddp/common/value_slots.h"
#include "ddp/common/worker_contract.h"

namespace ddp {

/// Turns SIGTERM, SIGINT and SIGHUP into a request to stop after the current step (flag only; the trainer
/// agrees on it with the other ranks and checkpoints first).
void install_stop_handlers();

/// The signal that asked this worker to stop, or 0.
int stop_signal();

/// Why the launcher asked (the value it queued with the signal), kAsked when it gave none.
StopReason stop_reason();

/// Every rank's agreement to stop after the same step: a vote carried in the side values, with the
/// reasons the voters were given, so that a rank nobody signalled can say why it stops.
class StopVote {
 public:
  /// Reserves the vote's slot in `side_values`, which must outlive it.
  explicit StopVote(ValueSlots& side_values)
      : side_values_(side_values),
        vote_(side_values.reserve("stop vote")),
        reasons_(side_values.reserve("stop reasons", kReasons)) {}
  /// Before the step's transfer: this rank's vote (whether a signal asked it to stop) and its reason.
  void cast();
  /// After it: whether any rank voted to stop. Every rank sees the same sums, so all stop alike.
  bool agreed() const { return side_values_[vote_][0] > 0; }
  /// After an agreed vote: the voters' reason, the launcher's own first (a membership change, then
  /// a peer's interruption or failure), else kAsked.
  StopReason reason() const;

 private:
  static constexpr std::size_t kReasons = static_cast<std::size_t>(StopReason::kPeerInterrupted) + 1;
  ValueSlots& side_values_;
  ValueSlots::Slot vote_;     // 1 on each rank a signal asked to stop
  ValueSlots::Slot reasons_;  // by StopReason: 1 on each rank that stops for it
};

/// Writes progress to DDPRUN_HEARTBEAT_FD, when the launcher gave one; never blocks.
class Heartbeat {
 public:
  /// Uses DDPRUN_HEARTBEAT_FD when set and open; otherwise beats go nowhere.
  Heartbeat();
  /// Reports that `step` is under way or done; in a pipeline stage, that it finished its part of
  /// microbatch `microbatch` (-1: none yet).
  void beat(int64_t step, int microbatch = -1) const;
  /// This worker's pipeline stage, told with every beat.
  void set_stage(int stage) { stage_ = stage; }
  /// Whether beats reach a launcher.
  bool watched() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  int stage_ = -1;
};

/// While it lives, beats for `step` once a second from a thread of its own: for work that is
/// progress but shows no step of its own (an evaluation, a checkpoint write, the first step's
/// set-up), on every rank, the ones waiting for it in a collective included. A hang inside such
/// work is still caught: every collective in it fails after dist.timeout_s, naming who is missing.
class HeartbeatPulse {
 public:
  HeartbeatPulse(const Heartbeat& heartbeat, int64_t step);
  ~HeartbeatPulse();
  HeartbeatPulse(const HeartbeatPulse&) = delete;
  HeartbeatPulse& operator=(const HeartbeatPulse&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace ddp
