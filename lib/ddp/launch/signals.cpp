#include "ddp/launch/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace ddp {
namespace {

int g_write_fd = -1;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_write_fd, &byte, 1);
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("signal pipe");
  read_fd_ = fds[0];
  g_write_fd = fds[1];
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
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
