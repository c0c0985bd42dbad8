#pragma once
// What a failed run must not leave behind: a process, a shared-memory segment, a store directory.
// Include it after Catch, as every test file does.

#include <catch2/catch.hpp>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "support/subprocess.h"

namespace ddp::test {

/// /dev/shm entries of ddprun ("ddprun-<pid>-...") whose creating process is gone: leaks, whoever
/// made them (a live creator's segment is in use, so parallel tests do not disturb this).
inline std::vector<std::string> orphaned_shared_memory() {
  std::vector<std::string> orphans;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("ddprun-", 0) != 0) continue;
    long pid = std::strtol(name.c_str() + 7, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) orphans.push_back(name);
  }
  return orphans;
}

/// Checks, allowing a moment for the kernel to deliver the last kills: no process whose command
/// line holds `marker` (a run's output directory), no orphaned shared memory, and, when given, no
/// private store directory in `tmpdir` (the TMPDIR the run had).
inline void check_nothing_left(const std::string& marker, const std::string& tmpdir = "") {
  auto left = [&] {
    // Shared memory too: another test's launcher may be a moment from removing its worker's.
    bool any = !run_shell("pgrep -f '[d]dp[-r].*" + marker + "' || true").out.empty() ||
               !orphaned_shared_memory().empty();
    if (!tmpdir.empty())
      for (const auto& entry : std::filesystem::directory_iterator(tmpdir))
        any |= entry.path().filename().string().rfind("ddprun-store-", 0) == 0;
    return any;
  };
  for (int i = 0; i < 50 && left(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  INFO("left behind by the run of " << marker);
  CHECK(run_shell("pgrep -af '[d]dp[-r].*" + marker + "' || true").out == "");
  CHECK(orphaned_shared_memory().empty());
  if (!tmpdir.empty())
    for (const auto& entry : std::filesystem::directory_iterator(tmpdir))
      CHECK(entry.path().filename().string().rfind("ddprun-store-", 0) != 0);
}

}  // namespace ddp::test
