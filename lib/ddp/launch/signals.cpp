#include "ddp/launch/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iterator>
#include <stdexcept>

#include "ddp/common/stop_request.h"
#include "ddp/launch/process.h"

namespace ddp {
namespace {

int g_write_fd = -1;
// SIGUSR1 and SIGUSR2 too: Slurm's --signal=USR1@N (a time limit near) would otherwise end ddprun
// by their default action, and its workers with it (PR_SET_PDEATHSIG), with no checkpoint.
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
static_assert(std::size(kSignals) == std::size(kStopSignals) + 1, "kStopSignals and SIGCHLD");

StopRequest g_request;  // Note [One request, sent twice]

void on_signal(int sig, siginfo_t* info, void*) {
  int saved = errno;
  if (sig == SIGCHLD || !g_request.repeated(sig, info)) {
    unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = write(g_write_fd, &byte, 1);
  }
  errno = saved;
}

// nohup's SIGHUP, ignored when ddprun started, stays ignored: a logout must not stop the run that
// nohup was to keep going (was: taken as a stop request). Other signals ignored on entry (a
// non-interactive shell's background job ignores SIGINT) are still the stop requests they ask for.
bool hangup_ignored_by_nohup(int sig) {
  struct sigaction now = {};
  return sig == SIGHUP && sigaction(SIGHUP, nullptr, &now) == 0 && now.sa_handler == SIG_IGN;
}

// ExitOnStopSignal's lines, one a stop signal, written before any handler may run: a handler may
// only write and exit.
char g_exit_lines[std::size(kStopSignals)][512];
struct sigaction g_previous[std::size(kStopSignals)];

void exit_on_signal(int sig) {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
    if (kStopSignals[i] == sig) {
      const char* line = g_exit_lines[i];
      std::size_t length = 0;
      while (line[length] != '\0') ++length;
      [[maybe_unused]] ssize_t n = write(STDERR_FILENO, line, length);
    }
  _exit(128 + sig);
}

}  // namespace

ExitOnStopSignal::ExitOnStopSignal(const std::string& while_doing) {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i)  // the line's end kept, however long the rest
    std::snprintf(g_exit_lines[i], sizeof g_exit_lines[i], "ddprun: received %s %.400s\n",
                  signal_name(kStopSignals[i]).c_str(), while_doing.c_str());
  struct sigaction action = {};
  action.sa_handler = exit_on_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : kStopSignals) sigaddset(&action.sa_mask, sig);
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], nullptr, &g_previous[i]);
    if (!hangup_ignored_by_nohup(kStopSignals[i])) sigaction(kStopSignals[i], &action, nullptr);
  }
}

ExitOnStopSignal::~ExitOnStopSignal() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

SignalPipe::SignalPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("signal pipe");
  read_fd_ = fds[0];
  g_write_fd = fds[1];
  struct sigaction action = {};
  action.sa_sigaction = on_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : kSignals) sigaddset(&action.sa_mask, sig);  // one handler at a time on a thread
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  for (int sig : kSignals)
    if (!hangup_ignored_by_nohup(sig)) sigaction(sig, &action, nullptr);
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
