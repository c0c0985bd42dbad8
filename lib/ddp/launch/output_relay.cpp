#include "ddp/launch/output_relay.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

// A line this long without a newline is emitted in pieces rather than held forever.
constexpr std::size_t kMaxLine = 1 << 20;

void write_all(int fd, const std::string& data) {
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // console gone: keep supervising regardless
    p += n;
    left -= n;
  }
}

// Note [Earlier launches' logs]: a run id may come back (a Slurm requeue keeps its job id, a user
// repeats --run-id), and with it the same DIR/RUN_ID/attempt_N/RANK/stdout.log. The earlier launch's
// file is kept as stdout.log.1 (then .2, ...: the oldest has the lowest number), never truncated:
// a preempted attempt's logs are the ones that explain it. Each file has one writer (its node), so
// nodes sharing a log directory do not race. A symbolic link is left for open_for_append to refuse.
void keep_earlier_log(const std::string& path) {
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return;
  for (int n = 1; n < 10000; ++n) {
    std::string kept = path + "." + std::to_string(n);
    if (lstat(kept.c_str(), &info) == 0 || errno != ENOENT) continue;
    if (rename(path.c_str(), kept.c_str()) == 0) return;
    break;  // cannot rename: the new output is appended below instead, so nothing is lost either way
  }
}

int open_log(const std::string& path) {
  if (path.empty()) return -1;
  keep_earlier_log(path);
  return open_for_append(path);
}

// A line of a C++ backtrace as LibTorch prints them: "frame #3: ...", "Exception raised from ...".
bool is_backtrace_line(const std::string& line) {
  std::size_t start = line.find_first_not_of(' ');
  if (start == std::string::npos) return false;
  return line.compare(start, 7, "frame #") == 0 || line.compare(start, 22, "Exception raised from ") == 0;
}

// Whether a progress line is on the terminal now: one per process, as the terminal is.
bool progress_on_screen = false;

const std::string kMarker = kProgressMarker;  // Note [Progress lines]

// Note [Unfinished lines]: lines are shown whole behind their rank's prefix, so that ranks never
// interleave mid-line. But a prompt ("(Pdb) ", "Continue? ") or a progress bar redrawn with
// carriage returns (tqdm) finishes its line late or never: held whole, it showed nothing until its
// newline, and a bar's returns overwrote the prefix. So on a terminal, a line a worker has begun
// and left for a moment is shown as far as it goes, each return followed by the prefix again, and
// stays open for that worker to go on; any other output first ends it with a newline, and the
// worker's next bytes start a new line behind the prefix. The log files still get whole lines.
// The stream whose line is open on the console (null: none), and the console's descriptor.
const void* open_line_owner = nullptr;
int open_line_console = -1;

void end_open_line() {
  if (!open_line_owner) return;
  write_all(open_line_console, "\n");
  open_line_owner = nullptr;
}

// `text` for the console behind `prefix`: a carriage return brings the prefix back with it, but for
// one that ends a line (`line_ends`: a CRLF's).
std::string with_prefix_after_returns(const std::string& text, const std::string& prefix, bool line_ends) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '\r' && (i + 1 < text.size() || !line_ends)) out += prefix;
  }
  return out;
}

// The terminal's width, for cutting a progress line that would wrap (a wrapped line cannot be
// redrawn in place); 0 when unknown.
std::size_t terminal_columns() {
  winsize size{};
  return ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 ? size.ws_col : 0;
}

}  // namespace

void clear_progress_line() {
  end_open_line();  // whatever comes next starts on a line of its own
  if (!progress_on_screen) return;
  write_all(1, "\r\x1b[K");
  progress_on_screen = false;
}

void say(const std::string& line) {
  clear_progress_line();
  std::string text = "ddprun: " + line + "\n";
  [[maybe_unused]] ssize_t n = write(2, text.data(), text.size());
}

OutputRelay::~OutputRelay() { drain_and_close(); }

void OutputRelay::add_worker(int worker, int stdout_fd, int stderr_fd, const RelayTarget& target) {
  targets_[worker] = target;
  int stdout_log = open_log(target.stdout_log);
  int stderr_log = open_log(target.stderr_log);
  for (int fd : {stdout_fd, stderr_fd}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  for (auto [fd, is_stderr, log_fd] : {std::tuple{stdout_fd, false, stdout_log}, {stderr_fd, true, stderr_log}}) {
    Stream& stream = streams_[fd];
    stream.worker = worker;
    stream.is_stderr = is_stderr;
    stream.console_is_terminal = isatty(is_stderr ? STDERR_FILENO : STDOUT_FILENO);
    stream.log_fd = log_fd;
  }
}

std::vector<int> OutputRelay::open_fds() const {
  std::vector<int> fds;
  for (const auto& [fd, stream] : streams_) fds.push_back(fd);
  return fds;
}

void OutputRelay::on_readable(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) return;
  Stream& stream = it->second;
  char buffer[65536];
  // A bounded amount per wake-up: a worker that writes without pause must not starve supervision.
  for (int reads = 0; reads < 16; ++reads) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_stream(fd);
      return;
    }
    if (stream.partial.size() <= stream.shown) stream.unshown_since = std::chrono::steady_clock::now();
    stream.partial.append(buffer, n);
    stream.last_read = std::chrono::steady_clock::now();
    std::size_t start = 0, newline;
    while ((newline = stream.partial.find('\n', start)) != std::string::npos) {
      emit(stream, stream.partial.substr(start, newline - start), true);
      start = newline + 1;
    }
    stream.partial.erase(0, start);
    if (stream.partial.size() >= kMaxLine) {
      emit(stream, stream.partial, false);
      stream.partial.clear();
    }
  }
}

// Note [One usage error]: a config error is found by every rank alike, and each reports it
// ("ddp-train: rank N: error: ..."), so N ranks would print it N times. Such a line is held until its
// worker's stderr closes or writes another line, then shown unless another rank's was shown already,
// rank aside. Logs and the failure summary's tail still get every rank's.
namespace {
const std::string kUsageErrorStart = "ddp-train: rank ";
}  // namespace

bool is_usage_error_line(const std::string& line) {
  return line.compare(0, kUsageErrorStart.size(), kUsageErrorStart) == 0 && line.find(": error: ") != std::string::npos;
}

std::optional<int> rank_reported(const std::string& line) {
  if (line.compare(0, kUsageErrorStart.size(), kUsageErrorStart) != 0) return std::nullopt;
  std::size_t at = kUsageErrorStart.size(), end = at;
  while (end < line.size() && end - at < 9 && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
  if (end == at || line.compare(end, 2, ": ") != 0) return std::nullopt;
  return std::stoi(line.substr(at, end - at));
}

std::optional<int> rank_relayed(const std::string& line) {
  if (!rank_reported(line)) return std::nullopt;
  const std::size_t kind = line.find(": ", kUsageErrorStart.size());  // after the reporting rank
  const std::size_t message = kind == std::string::npos ? kind : line.find(": ", kind + 2);
  if (message == std::string::npos) return std::nullopt;
  static const std::string kRank = "rank ";
  if (line.compare(message + 2, kRank.size(), kRank) != 0) return std::nullopt;
  const std::size_t at = message + 2 + kRank.size();
  std::size_t end = at;
  while (end < line.size() && end - at < 9 && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
  if (end == at || line.compare(end, 2, ": ") != 0) return std::nullopt;
  return std::stoi(line.substr(at, end - at));
}

namespace {

std::string without_rank(const std::string& line) {
  std::size_t colon = line.find(": ", kUsageErrorStart.size());
  return colon == std::string::npos ? line : line.substr(colon + 2);
}

}  // namespace

void OutputRelay::release_held(Stream& stream) {
  for (const auto& line : stream.held)
    if (!usage_errors_shown_.count(without_rank(line)) && to_console(stream, line))
      usage_errors_shown_.emplace(without_rank(line), stream.worker);
  stream.held.clear();
}

std::optional<int> OutputRelay::usage_error_shown_by(const std::string& line) const {
  auto found = usage_errors_shown_.find(without_rank(line));
  return found == usage_errors_shown_.end() ? std::nullopt : std::optional<int>(found->second);
}

bool OutputRelay::shows_on_terminal(const Stream& stream) {
  const RelayTarget& target = targets_[stream.worker];
  return target.to_console && !(target.redirected & (stream.is_stderr ? 2 : 1)) && stream.console_is_terminal;
}

void OutputRelay::show_unfinished_lines(std::chrono::milliseconds idle) {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [fd, stream] : streams_) {
    // A pause in the writing shows the line; so does a line written on without one (a bar redrawn
    // faster than `idle`), at least every other `idle`.
    if (stream.partial.size() <= stream.shown || !shows_on_terminal(stream) ||
        (now - stream.last_read < idle && now - stream.unshown_since < 2 * idle))
      continue;
    // What may yet be a line held whole (Note [One usage error], Note [Progress lines]) waits for its end.
    const std::string& begun = stream.partial;
    auto may_become = [&begun](const std::string& start) {
      return begun.compare(0, std::min(begun.size(), start.size()), start, 0, std::min(begun.size(), start.size())) ==
             0;
    };
    if (stream.is_stderr ? may_become(kUsageErrorStart) : targets_[stream.worker].progress && may_become(kMarker))
      continue;
    const std::string& prefix = targets_[stream.worker].prefix;
    const int console = stream.is_stderr ? STDERR_FILENO : STDOUT_FILENO;
    std::string text;
    if (open_line_owner != &stream) {
      clear_progress_line();  // ends another's open line
      text = prefix;
    }
    text += with_prefix_after_returns(begun.substr(stream.shown), prefix, /*line_ends=*/false);
    write_all(console, text);
    stream.shown = begun.size();
    open_line_owner = &stream;
    open_line_console = console;
  }
}

void OutputRelay::line_ended_by_echo() {
  open_line_owner = nullptr;
  progress_on_screen = false;  // the echo went after it: a redraw's "\r\x1b[K" would clear the wrong line
}

bool OutputRelay::to_console(const Stream& stream, const std::string& line, std::size_t shown) {
  const RelayTarget& target = targets_[stream.worker];
  if (!target.to_console || (target.redirected & (stream.is_stderr ? 2 : 1))) return false;
  const int console = stream.is_stderr ? STDERR_FILENO : STDOUT_FILENO;
  // Note [Unfinished lines]: the rest of a line shown in part, behind the prefix again where other
  // output came between.
  std::string rest = line.substr(std::min(shown, line.size()));
  if (stream.console_is_terminal) rest = with_prefix_after_returns(rest, target.prefix, /*line_ends=*/true);
  if (shown > 0 && open_line_owner == &stream) {
    open_line_owner = nullptr;
    write_all(console, rest + "\n");
  } else if (shown > 0 && rest.empty()) {
    // Its line was shown whole and ended by other output: only the newline is left, said already.
  } else {
    clear_progress_line();
    write_all(console, target.prefix + rest + "\n");
  }
  if (!progress_.empty()) {
    write_all(1, progress_);
    progress_on_screen = true;
  }
  return true;
}

void OutputRelay::emit(Stream& stream, const std::string& line, bool ended) {
  const RelayTarget& target = targets_[stream.worker];
  const std::size_t shown = std::exchange(stream.shown, 0);  // of this line, which ends here
  // Note [Progress lines]: a worker given DDPRUN_PROGRESS (only when the console is a terminal) may
  // write progress lines to stdout, starting with kProgressMarker. Each is drawn in place of the
  // previous one, cut to the terminal's width, taken off the screen before any other line and
  // drawn again after it, and never reaches a log file.
  if (target.progress && !stream.is_stderr && line.compare(0, kMarker.size(), kMarker) == 0) {
    if (!target.to_console) return;
    progress_ = target.prefix + line.substr(kMarker.size());
    if (std::size_t columns = terminal_columns(); columns > 1 && progress_.size() >= columns)
      progress_.resize(columns - 1);
    end_open_line();  // another rank's unfinished line stays on the screen
    write_all(1, "\r\x1b[K" + progress_);
    progress_on_screen = true;
    progress_worker_ = stream.worker;
    return;
  }
  if (stream.log_fd >= 0) write_all(stream.log_fd, ended ? line + "\n" : line);
  if (stream.is_stderr) {
    // The summary shows what went wrong, not where in LibTorch: a backtrace's frames would push the
    // message itself out of the last lines.
    if (!is_backtrace_line(line)) {
      auto& tail = tails_[stream.worker];
      tail.push_back(line);
      if (tail.size() > kTailLines) tail.pop_front();
    }
    if (is_usage_error_line(line)) {
      stream.held.push_back(line);
      return;
    }
    release_held(stream);
  }
  to_console(stream, line, shown);
}

void OutputRelay::close_stream(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) return;
  if (!it->second.partial.empty()) emit(it->second, it->second.partial, false);
  if (open_line_owner == &it->second) end_open_line();  // its worker is gone: nothing more comes
  release_held(it->second);
  if (it->second.log_fd >= 0) close(it->second.log_fd);
  if (!it->second.is_stderr && it->second.worker == progress_worker_) {
    clear_progress_line();  // its worker is gone: its last ETA must not linger
    progress_.clear();
  }
  close(fd);
  streams_.erase(it);
}

void OutputRelay::drain_and_close() {
  for (int fd : open_fds()) {
    on_readable(fd);  // non-blocking: takes what is there now
    close_stream(fd);
  }
  clear_progress_line();  // the shell's prompt starts on a clean line
  progress_.clear();
}

std::vector<std::string> OutputRelay::stderr_tail(int worker) const {
  auto it = tails_.find(worker);
  if (it == tails_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace ddp
