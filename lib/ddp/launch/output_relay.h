#pragma once
// Relays every worker's output to the console as whole lines behind a rank prefix, to per-rank
// log files, and keeps each worker's last stderr lines for the failure summary.

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddp {

/// How one worker's output is shown and kept.
struct RelayTarget {
  std::string prefix;        ///< e.g. "[rank 3] " or "[host:rank 3] "
  bool to_console = true;    ///< --local-ranks-filter
  std::string stdout_log;    ///< file path, empty: none
  std::string stderr_log;
  int redirected = 0;        ///< torchrun's --redirects: these streams (1 stdout, 2 stderr) reach their log only
  bool progress = false;     ///< given DDPRUN_PROGRESS: its stdout lines that start with kProgressMarker are progress
};

/// Whether a worker's stderr line is ddp-train's report of a usage error ("ddp-train: rank N: error: ..."),
/// shown once for all ranks (Note [One usage error]).
bool is_usage_error_line(const std::string& line);

/// The rank a worker's stderr line is ddp-train's report for ("ddp-train: rank N: ..."), if it is
/// one: under dist.threads a worker holds several ranks, and its report names the one that failed.
std::optional<int> rank_reported(const std::string& line);

/// The rank whose failure a worker's report relays ("ddp-train: rank 1: I/O error: rank 0: ..."):
/// every rank fails alike when one could not write (a full disk), each naming the rank that could
/// not. Nullopt for a failure of its own.
std::optional<int> rank_relayed(const std::string& line);

/// Takes the progress line (Note [Progress lines]) off the terminal before the launcher writes a
/// message of its own; it comes back with the next progress update.
void clear_progress_line();

/// The launcher's own line on stderr, "ddprun: LINE", in one write, the progress line cleared first.
void say(const std::string& line);

/// Single-threaded: one writer per console stream, so lines can never interleave mid-line.
class OutputRelay {
 public:
  static constexpr std::size_t kTailLines = 20;

  OutputRelay() = default;
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  /// Starts relaying a worker's pipes (made non-blocking here). Throws if a log file cannot be opened.
  void add_worker(int worker, int stdout_fd, int stderr_fd, const RelayTarget& target);

  /// The pipes still open, for poll().
  std::vector<int> open_fds() const;

  /// Reads what `fd` has now and emits its complete lines; closes it at end of file.
  void on_readable(int fd);

  /// Shows on a terminal the line each worker has begun and left unfinished for `idle` (a prompt, a
  /// progress bar redrawn with carriage returns): Note [Unfinished lines].
  void show_unfinished_lines(std::chrono::milliseconds idle);
  /// The terminal's echo of a typed line ended the line open on the screen (Note [Terminal input]):
  /// its worker's next bytes start a new line behind the prefix.
  void line_ended_by_echo();

  /// Reads whatever every pipe holds without waiting, then closes them all, flushing partial lines.
  void drain_and_close();

  /// The last kTailLines stderr lines of a worker.
  std::vector<std::string> stderr_tail(int worker) const;

  /// The worker whose copy of usage error `line` (any rank's) is on the console (Note [One usage
  /// error]), or nullopt when none is.
  std::optional<int> usage_error_shown_by(const std::string& line) const;

 private:
  struct Stream {
    int worker = 0;
    bool is_stderr = false;
    bool console_is_terminal = false;  // looked at once: the launcher's own streams stay what they are
    int log_fd = -1;
    std::string partial;
    std::size_t shown = 0;  // bytes of `partial` on the console (Note [Unfinished lines])
    std::chrono::steady_clock::time_point last_read{};
    std::chrono::steady_clock::time_point unshown_since{};  // when `partial` last grew past `shown`
    std::vector<std::string> held;  // Note [One usage error]
  };
  /// One line (`ended`: it had its newline) to the console and the log; see Note [Progress lines].
  void emit(Stream& stream, const std::string& line, bool ended);
  /// Whether it was written: a filtered or redirected stream's lines are not. `shown`: the bytes of
  /// `line` already on the console.
  bool to_console(const Stream& stream, const std::string& line, std::size_t shown = 0);
  /// Whether `stream`'s lines reach a terminal.
  bool shows_on_terminal(const Stream& stream);
  void release_held(Stream& stream);
  void close_stream(int fd);

  std::map<int, Stream> streams_;  // by pipe fd
  std::map<int, RelayTarget> targets_;
  std::map<int, std::deque<std::string>> tails_;
  std::map<std::string, int> usage_errors_shown_;  // without their rank: the worker whose was shown
  std::string progress_;  // the last progress line, prefix included ("" if none)
  int progress_worker_ = -1;
};

}  // namespace ddp
