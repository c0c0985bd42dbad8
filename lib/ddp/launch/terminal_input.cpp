#include "ddp/launch/terminal_input.h"

#include <fcntl.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

namespace ddp {

TerminalInput::TerminalInput() {
  // A terminal that is not this session's (tcgetpgrp fails) would never say we are its foreground:
  // local rank 0 then reads /dev/null, as the others do, rather than a pipe that never ends.
  if (!isatty(STDIN_FILENO) || tcgetpgrp(STDIN_FILENO) < 0) return;
  // Read through a description of our own, non-blocking: another reader of the terminal (a
  // wrapper's input()) may take a line poll said was there, and a blocking read would then hold the
  // launcher's loop until the next one. Not fd 0's own flags, which the shell shares.
  terminal_fd_ = open("/proc/self/fd/0", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  int fds[2];
  if (terminal_fd_ < 0 || pipe2(fds, O_CLOEXEC) != 0) {  // then no worker reads the terminal, as before
    if (terminal_fd_ >= 0) close(terminal_fd_);
    terminal_fd_ = -1;
    return;
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  fcntl(write_fd_, F_SETFL, fcntl(write_fd_, F_GETFL) | O_NONBLOCK);  // a worker that reads nothing never blocks us
  signal(SIGTTIN, SIG_IGN);
}

TerminalInput::~TerminalInput() {
  worker_started();
  close_pipe();
  if (terminal_fd_ >= 0) close(terminal_fd_);
}

void TerminalInput::worker_started() {
  if (read_fd_ >= 0) close(read_fd_);
  read_fd_ = -1;
}

int TerminalInput::poll_fd() const {
  return write_fd_ >= 0 && tcgetpgrp(STDIN_FILENO) == getpgrp() ? terminal_fd_ : -1;
}

bool TerminalInput::on_readable() {
  char buffer[4096];
  const ssize_t n = read(terminal_fd_, buffer, sizeof buffer);
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
  termios modes{};  // the echo ends the line on the screen only where the terminal echoes
  return buffer[n - 1] == '\n' && tcgetattr(terminal_fd_, &modes) == 0 && (modes.c_lflag & ECHO);
}

void TerminalInput::close_pipe() {
  if (write_fd_ >= 0) close(write_fd_);
  write_fd_ = -1;
}

}  // namespace ddp
