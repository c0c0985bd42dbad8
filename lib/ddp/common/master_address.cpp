#include "ddp/common/master_address.h"

#include <netdb.h>
#include <poll.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// A DNS server that does not answer yet (EAI_AGAIN) gets this long; "no such name" is final at once.
constexpr auto kRetryFor = std::chrono::seconds(4);
// scontrol asks slurmctld; a controller that does not answer must not hold the job for long.
constexpr int kScontrolTimeoutMs = 5000;

int getaddrinfo_status(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int status = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (found) freeaddrinfo(found);
  return status;
}

// What `scontrol -o show node NAME` prints, within kScontrolTimeoutMs; nullopt if it fails or is slow.
std::optional<std::string> scontrol_show_node(const std::string& name) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  // posix_spawn, not fork: ddp-train has threads by now, and a forked child of a threaded process
  // may only make async-signal-safe calls before exec.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::string node = name;
  char* argv[] = {const_cast<char*>("scontrol"), const_cast<char*>("-o"), const_cast<char*>("show"),
                  const_cast<char*>("node"), node.data(), nullptr};
  pid_t pid = -1;
  int spawned = posix_spawnp(&pid, "scontrol", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    close(fds[0]);
    close(fds[1]);
    return std::nullopt;
  }
  close(fds[1]);
  std::string out;
  auto deadline = Clock::now() + std::chrono::milliseconds(kScontrolTimeoutMs);
  bool finished = false;
  while (Clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (poll(&p, 1, std::max(1, left)) <= 0) continue;
    char buffer[4096];
    ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n <= 0) {
      finished = true;
      break;
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  if (!finished) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!finished || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

std::optional<std::string> slurm_node_addr(const std::string& name) {
  if (!std::getenv(slurm::kJobId)) return std::nullopt;
  auto shown = scontrol_show_node(name);
  if (!shown) return std::nullopt;
  for (const auto& field : split(*shown, ' ')) {
    if (field.rfind("NodeAddr=", 0) != 0) continue;
    std::string addr = field.substr(9);
    while (!addr.empty() && (addr.back() == '\n' || addr.back() == '\r')) addr.pop_back();
    if (!addr.empty() && addr != name) return addr;
  }
  return std::nullopt;
}

// getaddrinfo's status for `name`, retrying a name server that is not answering yet.
int resolve_status(const AddressLookup& lookup, const std::string& name) {
  auto give_up = Clock::now() + kRetryFor;
  int status = lookup.resolve(name);
  while (status == EAI_AGAIN && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    status = lookup.resolve(name);
  }
  return status;
}

}  // namespace

AddressLookup system_address_lookup() { return {getaddrinfo_status, slurm_node_addr}; }

MasterAddress resolve_master_address(const std::string& name, const std::string& fix, const AddressLookup& lookup) {
  int status = resolve_status(lookup, name);
  if (status == 0) return {name, ""};
  if (auto addr = lookup.slurm_node_addr(name); addr && resolve_status(lookup, *addr) == 0)
    return {*addr, "the master " + name + " does not resolve here (" + gai_strerror(status) +
                       "); Slurm's NodeAddr for it is " + *addr + " (scontrol show node " + name + ")"};
  throw UserError("the master address " + printable(name, 255) + " does not resolve (" + gai_strerror(status) +
                  (std::getenv(slurm::kJobId) ? ", and Slurm knows no NodeAddr for it" : "") + "): " + fix);
}

}  // namespace ddp
