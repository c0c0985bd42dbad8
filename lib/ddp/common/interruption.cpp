#include "ddp/common/interruption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace ddp {
namespace {

constexpr int kDeferred[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_signal{0};
const char* g_leaving = "";
struct sigaction g_before[3];

void on_signal(int signal) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, signal)) {
    // The second: at once, by the default action, so the exit status says the signal.
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigaction(signal, &fallback, nullptr);
    raise(signal);
    return;
  }
  ssize_t ignored = write(STDERR_FILENO, g_leaving, std::strlen(g_leaving));
  (void)ignored;
}

}  // namespace

DeferredInterruption::DeferredInterruption(const char* leaving) {
  g_leaving = leaving;
  g_signal = 0;
  struct sigaction deferred {};
  deferred.sa_handler = on_signal;
  sigemptyset(&deferred.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kDeferred[i], &deferred, &g_before[i]);
}

DeferredInterruption::~DeferredInterruption() {
  for (int i = 0; i < 3; ++i) sigaction(kDeferred[i], &g_before[i], nullptr);
}

void stop_if_interrupted() {
  if (int signal = g_signal.load()) throw Interrupted(signal);
}

}  // namespace ddp
