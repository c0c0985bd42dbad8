#include "ddp/launch/output_relay.h"

#include <cctype>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

// The terminal's width, for cutting a progress line that would wrap (a wrapped line cannot be
// redrawn in place); 0 when unknown.
std::size_t terminal_columns() {
  winsize size{};
  return ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 ? size.ws_col : 0;
}

}  // namespace

void clear_progress_line() {
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
  streams_[stdout_fd] = Stream{worker, false, stdout_log, {}, {}};
  streams_[stderr_fd] = Stream{worker, true, stderr_log, {}, {}};
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
    stream.partial.append(buffer, n);
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

bool OutputRelay::to_console(const Stream& stream, const std::string& line) {
  const RelayTarget& target = targets_[stream.worker];
  if (!target.to_console || (target.redirected & (stream.is_stderr ? 2 : 1))) return false;
  clear_progress_line();
  write_all(stream.is_stderr ? 2 : 1, target.prefix + line + "\n");
  if (!progress_.empty()) {
    write_all(1, progress_);
    progress_on_screen = true;
  }
  return true;
}

void OutputRelay::emit(Stream& stream, const std::string& line, bool ended) {
  const RelayTarget& target = targets_[stream.worker];
  // Note [Progress lines]: a worker given DDPRUN_PROGRESS (only when the console is a terminal) may
  // write progress lines to stdout, starting with kProgressMarker. Each is drawn in place of the
  // previous one, cut to the terminal's width, taken off the screen before any other line and
  // drawn again after it, and never reaches a log file.
  static const std::string marker = kProgressMarker;
  if (target.progress && !stream.is_stderr && line.compare(0, marker.size(), marker) == 0) {
    if (!target.to_console) return;
    progress_ = target.prefix + line.substr(marker.size());
    if (std::size_t columns = terminal_columns(); columns > 1 && progress_.size() >= columns)
      progress_.resize(columns - 1);
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
  to_console(stream, line);
}

void OutputRelay::close_stream(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) return;
  if (!it->second.partial.empty()) emit(it->second, it->second.partial, false);
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
