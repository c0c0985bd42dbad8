#pragma once
// What a worker hears from its launcher: SIGTERM/SIGINT/SIGHUP asking it to stop (preemption), and the
// heartbeat pipe through which it shows it is making progress.

#include <cstdint>

namespace ddp {

/// Turns SIGTERM, SIGINT and SIGHUP into a request to stop after the current step (flag only; the trainer
/// agrees on it with the other ranks and checkpoints first).
void install_stop_handlers();

/// The signal that asked this worker to stop, or 0.
int stop_signal();

/// Writes progress to DDPRUN_HEARTBEAT_FD, when the launcher gave one; never blocks.
class Heartbeat {
 public:
  /// Uses DDPRUN_HEARTBEAT_FD when set and open; otherwise beats go nowhere.
  Heartbeat();
  /// Reports that `step` is under way or done.
  void beat(int64_t step) const;

 private:
  int fd_ = -1;
};

}  // namespace ddp
