#pragma once
// A tool that writes several files and moves them in at the end (ddp-tokenize's shards, ddp-export's
// directory) must not die between two of them: a Ctrl-C there left a staging directory behind, or
// half of one run beside half of another. While a DeferredInterruption lives, SIGINT, SIGTERM and
// SIGHUP only raise a flag, which the writer reads between files (stop_if_interrupted) and unwinds
// from, its destructors cleaning up; a second request ends the process at once, as the user insists
// (the same signal within a second of the first is the same request: Note [One request, sent twice]).
// The moves themselves run with the signals held (SignalsHeld): one that comes then takes effect
// once they are done, the output whole.

#include <signal.h>

#include <string>

namespace ddp {

/// Thrown by stop_if_interrupted(): run_main reports it and exits 128 + signal, as the shell does.
class Interrupted {
 public:
  Interrupted(int signal, std::string what) : signal_(signal), what_(std::move(what)) {}
  int signal() const { return signal_; }
  /// What the tool left as it stopped, said after "stopped: by SIGINT; ".
  const std::string& what() const { return what_; }

 private:
  int signal_;
  std::string what_;
};

/// SIGINT, SIGTERM and SIGHUP as a flag while it lives, where they are not ignored (nohup's stay so).
class DeferredInterruption {
 public:
  /// `leaving` is said on stderr at the first signal (what the tool does before it stops);
  /// `left` is the Interrupted's text (what it left).
  DeferredInterruption(const char* leaving, std::string left);
  ~DeferredInterruption();
  DeferredInterruption(const DeferredInterruption&) = delete;
  DeferredInterruption& operator=(const DeferredInterruption&) = delete;

  /// The signals' earlier handlers back, before the destructor: under SignalsHeld, a signal that
  /// came during the moves then takes its own action when they are done.
  void end();

 private:
  struct sigaction before_[3] {};
  bool ended_ = false;
};

/// Throws Interrupted if a signal arrived while a DeferredInterruption lives; nothing otherwise.
void stop_if_interrupted();

/// SIGINT, SIGTERM and SIGHUP blocked while it lives: a pending one is delivered at its end.
class SignalsHeld {
 public:
  SignalsHeld();
  ~SignalsHeld();
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t before_{};
};

}  // namespace ddp
