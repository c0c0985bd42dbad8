#pragma once
// Note [One request, sent twice]: one stop request often arrives twice, within microseconds, from
// two senders: `timeout` signals its child and then its own process group, the child in it (at its
// time limit too); a Ctrl-C reaches both `timeout --foreground` and the program, and timeout passes
// its copy on; Slurm signals every process of a step. Taken as a second Ctrl-C, the second copy
// killed what the first was stopping cleanly (ddprun's workers before their checkpoint,
// ddp-tokenize before it removed what it wrote). So the same signal again within a second of the
// request's first, from any sender, is that request. Only a person's second Ctrl-C, two signals a
// terminal sent (the kernel's SI_KERNEL), is a second request: a person cannot press twice within
// microseconds by accident, and would want the kill.

#include <signal.h>

#include <atomic>
#include <ctime>

namespace ddp {

/// The stop request a process is answering, for its signal handlers; async-signal-safe. A
/// handler's mask keeps it from running twice on one thread, not on two: the two copies of one
/// request may be handled by two threads at once, so they take turns (a lock-free flag).
class StopRequest {
 public:
  /// Whether signal `sig` (with its handler's `info`, or null) is a copy of the request already
  /// taken; else it becomes the request.
  bool repeated(int sig, const siginfo_t* info) {
    while (busy_.test_and_set(std::memory_order_acquire)) {
    }
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
    const bool terminal = info && info->si_code == SI_KERNEL;
    const long long ns = (now.tv_sec - at_.tv_sec) * 1'000'000'000LL + (now.tv_nsec - at_.tv_nsec);
    const bool again = sig_ == sig && ns < 1'000'000'000LL && !(terminal && from_terminal_);
    if (again) {
      from_terminal_ = from_terminal_ || terminal;
    } else {
      sig_ = sig;
      from_terminal_ = terminal;
      at_ = now;
    }
    busy_.clear(std::memory_order_release);
    return again;
  }

  /// No request taken: the next signal is a first.
  void reset() {
    while (busy_.test_and_set(std::memory_order_acquire)) {
    }
    sig_ = 0;
    from_terminal_ = false;
    at_ = {};
    busy_.clear(std::memory_order_release);
  }

 private:
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  int sig_ = 0;
  bool from_terminal_ = false;  // a copy of it came from a terminal
  timespec at_{};               // its first copy
};

}  // namespace ddp
