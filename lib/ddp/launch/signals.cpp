#include "ddp/launch/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <iterator>
#include <stdexcept>

namespace ddp {
namespace {

int g_write_fd = -1;
// SIGUSR1 and SIGUSR2 too: Slurm's --signal=USR1@N (a time limit near) would otherwise end ddprun
// by their default action, and its workers with it (PR_SET_PDEATHSIG), with no checkpoint.
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
static_assert(std::size(kSignals) == std::size(kStopSignals) + 1, "kStopSignals and SIGCHLD");

// Note [One request, sent twice]: one stop request often arrives twice, within microseconds, from
// two senders: `timeout` signals its child and then its own process group, the child in it; a
// Ctrl-C reaches both `timeout --foreground` and ddprun, and timeout passes its copy on; Slurm
// signals every process of a step. Taken as a second Ctrl-C, the second copy killed the workers
// before their stop checkpoint. So the same signal again within a second of the request's first,
// from any sender, is that request. Only a person's second Ctrl-C, two signals a terminal sent (the
// kernel's SI_KERNEL), is a second request: a person cannot press twice within microseconds by
// accident, and would want the kill.
struct Request {
  int sig = 0;
  bool from_terminal = false;  // a copy of it came from a terminal
  timespec at{};               // its first copy
};
Request g_request;

bool repeated(int sig, const siginfo_t* info) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  const bool terminal = info && info->si_code == SI_KERNEL;
  const long long ns = (now.tv_sec - g_request.at.tv_sec) * 1'000'000'000LL + (now.tv_nsec - g_request.at.tv_nsec);
  if (g_request.sig == sig && ns < 1'000'000'000LL && !(terminal && g_request.from_terminal)) {
    g_request.from_terminal = g_request.from_terminal || terminal;
    return true;
  }
  g_request = {sig, terminal, now};
  return false;
}

void on_signal(int sig, siginfo_t* info, void*) {
  int saved = errno;
  if (sig == SIGCHLD || !repeated(sig, info)) {
    unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = write(g_write_fd, &byte, 1);
  }
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("signal pipe");
  read_fd_ = fds[0];
  g_write_fd = fds[1];
  struct sigaction action = {};
  action.sa_sigaction = on_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : kSignals) sigaddset(&action.sa_mask, sig);  // one handler at a time: g_request is shared
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  for (int sig : kSignals) sigaction(sig, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the supervisor
}

SignalPipe::~SignalPipe() {
  for (int sig : kSignals) signal(sig, SIG_DFL);
  close(read_fd_);
  close(g_write_fd);
  g_write_fd = -1;
}

std::vector<int> SignalPipe::take() {
  std::vector<int> received;
  unsigned char buffer[64];
  ssize_t n;
  while ((n = read(read_fd_, buffer, sizeof buffer)) > 0)
    for (ssize_t i = 0; i < n; ++i) received.push_back(buffer[i]);
  return received;
}

}  // namespace ddp
