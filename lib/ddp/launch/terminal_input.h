#pragma once
// Note [Terminal input]
// A worker cannot read the launcher's terminal: its process group is its own (so that a signal to
// it reaches all it started), and a read from a terminal by a group other than the foreground one
// stops it (SIGTTIN). So on a terminal a `breakpoint()`'s prompt showed (Note [Unfinished lines])
// but could not be answered. Instead, local rank 0's standard input is a pipe, and while the
// launcher is the terminal's foreground process group what is typed there goes to it, a line at a
// time as the terminal edits and echoes it; end of input (Ctrl-D) closes the pipe. Lines typed
// ahead while it runs go there too, as under torchrun they reach the workers. In the background
// (`ddprun ... &`, or after Ctrl-Z and bg) the launcher reads nothing, so rank 0 waits for `fg` as a
// background job reading the terminal would, and SIGTTIN is ignored so that a read begun just as
// it went there fails rather than stops it. The other local ranks read /dev/null, as all did before,
// and so does rank 0 where the terminal is not the session's own.

namespace ddp {

class TerminalInput {
 public:
  /// Opens the pipe when the launcher's standard input is a terminal; otherwise does nothing, and
  /// the workers read the launcher's standard input itself (a file, a pipe).
  TerminalInput();
  ~TerminalInput();
  TerminalInput(const TerminalInput&) = delete;
  TerminalInput& operator=(const TerminalInput&) = delete;

  /// The standard input to give local rank 0: the pipe's read end; -1 when there is none. Closed
  /// here by worker_started().
  int worker_end() const { return read_fd_; }
  void worker_started();

  /// The descriptor to poll for what is typed (the terminal, opened again) while this launcher is
  /// the terminal's foreground and the pipe is open; -1 otherwise.
  int poll_fd() const;
  /// Standard input is readable: what it has goes to the pipe. End of input, or a worker that
  /// closed its end, closes the pipe. True when a typed line ended, which the terminal's echo ended
  /// on the screen too.
  bool on_readable();

 private:
  void close_pipe();
  int terminal_fd_ = -1;  // the terminal, opened again non-blocking
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace ddp
