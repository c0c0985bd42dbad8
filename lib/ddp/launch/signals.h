#pragma once
// Turns SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGCHLD into bytes on a pipe the monitor loop polls (the self-pipe trick).

#include <csignal>
#include <string>
#include <vector>

namespace ddp {

/// The signals that ask the launcher to stop its workers (and that it passes on): Ctrl-C, SIGTERM,
/// a hangup, Ctrl-\, and Slurm's --signal=USR1@N (or USR2). One list for the handlers, the
/// watchdog, which ignores them, and a new worker, which resets them before exec.
inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/// Installs the handlers for its lifetime; one instance per process.
class SignalPipe {
 public:
  /// Creates the pipe and installs the handlers.
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  /// Readable when a signal arrived.
  int fd() const { return read_fd_; }

  /// The signals received since the last call, in order.
  std::vector<int> take();

 private:
  int read_fd_ = -1;
};

/// Before the SignalPipe, while the nodes meet: a stop signal ends the launcher at once with one
/// line, "ddprun: received SIGTERM <while>", and exit 128 + the signal (was: the default action, no
/// word). No worker has started, so none is left to stop; the watchdog cleans up as after a SIGKILL.
/// nohup's SIGHUP stays ignored, as the SignalPipe leaves it. One instance at a time, gone before the
/// SignalPipe is made; restores the actions it found.
class ExitOnStopSignal {
 public:
  /// `while_doing`: "while waiting for the rendezvous at HOST:PORT (no worker had started)".
  explicit ExitOnStopSignal(const std::string& while_doing);
  ~ExitOnStopSignal();
  ExitOnStopSignal(const ExitOnStopSignal&) = delete;
  ExitOnStopSignal& operator=(const ExitOnStopSignal&) = delete;
};

}  // namespace ddp
