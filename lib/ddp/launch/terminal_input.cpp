#include "ddp/launch/terminal_input.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace ddp {

TerminalInput::TerminalInput() {
  if (!isatty(STDIN_FILENO)) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;  // then no worker reads the terminal, as before
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  fcntl(write_fd_, F_SETFL, fcntl(write_fd_, F_GETFL) | O_NONBLOCK);  // a worker that reads nothing never blocks us
  signal(SIGTTIN, SIG_IGN);
}

TerminalInput::~TerminalInput() {
  worker_started();
  close_pipe();
}

void TerminalInput::worker_started() {
  if (read_fd_ >= 0) close(read_fd_);
  read_fd_ = -1;
}

int TerminalInput::poll_fd() const {
  return write_fd_ >= 0 && tcgetpgrp(STDIN_FILENO) == getpgrp() ? STDIN_FILENO : -1;
}

bool TerminalInput::on_readable() {
  char buffer[4096];
  const ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EIO)) return false;  // EIO: sent to the background
  if (n <= 0) {
    close_pipe();  // Ctrl-D
    return false;
  }
  // What does not fit (a worker that reads none of it, 64 KiB behind) is dropped, as typing is;
  // a worker that closed its end (EPIPE; SIGPIPE is ignored) ends the relaying.
  for (ssize_t written = 0; written < n;) {
    const ssize_t w = write(write_fd_, buffer + written, static_cast<std::size_t>(n - written));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EPIPE) close_pipe();
    if (w <= 0) break;
    written += w;
  }
  return buffer[n - 1] == '\n';
}

void TerminalInput::close_pipe() {
  if (write_fd_ >= 0) close(write_fd_);
  write_fd_ = -1;
}

}  // namespace ddp
