#include "ddp/data/mapped_file_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

// Fixed slots, so the handler reads them without allocating or locking (async-signal-safe).
struct Guarded {
  std::atomic<const char*> begin{nullptr};
  std::size_t bytes = 0;
  char line[1024] = {};  // the whole message, formatted when the mapping is made
};
constexpr int kGuardedMappings = 256;
Guarded guarded_mappings[kGuardedMappings];
std::mutex guarding;

void on_sigbus(int sig, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  for (auto& slot : guarded_mappings) {
    const char* begin = slot.begin.load();
    if (begin && at >= begin && at < begin + slot.bytes) {
      (void)!::write(STDERR_FILENO, slot.line, std::strlen(slot.line));
      ::_exit(kExitUsage);
    }
  }
  ::signal(sig, SIG_DFL);  // not one of ours: the default crash, with its core dump
  ::raise(sig);
}

void install_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

}  // namespace

void guard_mapping(const void* begin, std::size_t bytes, const std::string& path, const std::string& key) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  std::lock_guard<std::mutex> lock(guarding);
  for (auto& slot : guarded_mappings) {
    if (slot.begin.load()) continue;
    const char* rank = std::getenv(env::kRank);
    std::snprintf(slot.line, sizeof slot.line,
                  "ddp-train: %s%s%serror: %s: %s shrank while this run read it (%zu bytes when mapped; SIGBUS past "
                  "its new end). A data file must not change during a run: restore it and resume, or start afresh\n",
                  rank ? "rank " : "", rank ? rank : "", rank ? ": " : "", key.c_str(), path.c_str(), bytes);
    slot.bytes = bytes;
    slot.begin.store(static_cast<const char*>(begin));
    return;
  }
  // More mappings than slots: the rest die by the default SIGBUS, unnamed.
}

void unguard_mapping(const void* begin) {
  std::lock_guard<std::mutex> lock(guarding);
  for (auto& slot : guarded_mappings)
    if (slot.begin.load() == begin) slot.begin.store(nullptr);
}

}  // namespace ddp
