#include "ddp/common/interruption.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ddp/common/stop_request.h"

namespace ddp {
namespace {

constexpr int kDeferred[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_signal{0};
const char* g_leaving = "";
std::string g_left;
StopRequest g_request;

sigset_t deferred_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : kDeferred) sigaddset(&set, signal);
  return set;
}

void on_signal(int signal, siginfo_t* info, void*) {
  const int saved_errno = errno;  // a failing call's errno, between it and its message, stays its own
  int none = 0;
  if (g_request.repeated(signal, info)) {
    // the same request again (Note [One request, sent twice]): taken already
  } else if (!g_signal.compare_exchange_strong(none, signal)) {
    // The second: at once, by the default action, so the exit status says the signal.
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigaction(signal, &fallback, nullptr);
    raise(signal);
  } else {
    ssize_t ignored = write(STDERR_FILENO, g_leaving, std::strlen(g_leaving));
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

DeferredInterruption::DeferredInterruption(const char* leaving, std::string left) {
  g_leaving = leaving;
  g_left = std::move(left);
  g_signal = 0;
  g_request.reset();
  struct sigaction deferred {};
  deferred.sa_sigaction = on_signal;
  deferred.sa_flags = SA_SIGINFO;
  deferred.sa_mask = deferred_set();  // one handler at a time on a thread (g_request's turns span threads)
  for (int i = 0; i < 3; ++i) {
    sigaction(kDeferred[i], nullptr, &before_[i]);
    if (before_[i].sa_handler != SIG_IGN) sigaction(kDeferred[i], &deferred, nullptr);
  }
}

void DeferredInterruption::end() {
  if (ended_) return;
  ended_ = true;
  for (int i = 0; i < 3; ++i) sigaction(kDeferred[i], &before_[i], nullptr);
}

DeferredInterruption::~DeferredInterruption() { end(); }

// Test hook: DDPRUN_TEST_STOP_CHECK_DELAY=MS waits that long before each look, a writer slow
// between its files, so that a test can signal it there and see it stop.
void stop_if_interrupted() {
  static const char* delay = std::getenv("DDPRUN_TEST_STOP_CHECK_DELAY");
  if (delay) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
  if (int signal = g_signal.load()) throw Interrupted(signal, g_left);
}

SignalsHeld::SignalsHeld() {
  const sigset_t held = deferred_set();
  sigprocmask(SIG_BLOCK, &held, &before_);
}

SignalsHeld::~SignalsHeld() { sigprocmask(SIG_SETMASK, &before_, nullptr); }

}  // namespace ddp
