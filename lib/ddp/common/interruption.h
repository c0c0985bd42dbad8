#pragma once
// A tool that writes several files and moves them in at the end (ddp-tokenize's shards, ddp-export's
// directory) must not die between two of them: a Ctrl-C there left a staging directory behind, or
// half of one run beside half of another. While a DeferredInterruption lives, SIGINT, SIGTERM and
// SIGHUP only raise a flag, which the writer reads between files (stop_if_interrupted) and unwinds
// from, its destructors cleaning up; a second signal ends the process at once, as the user insists.

namespace ddp {

/// Thrown by stop_if_interrupted(): run_main reports it and exits 128 + signal, as the shell does.
class Interrupted {
 public:
  explicit Interrupted(int signal) : signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

class DeferredInterruption {
 public:
  /// `leaving` is said on stderr at the first signal: what the tool does before it stops.
  explicit DeferredInterruption(const char* leaving);
  ~DeferredInterruption();
  DeferredInterruption(const DeferredInterruption&) = delete;
  DeferredInterruption& operator=(const DeferredInterruption&) = delete;
};

/// Throws Interrupted if a signal arrived while a DeferredInterruption lives; nothing otherwise.
void stop_if_interrupted();

}  // namespace ddp
