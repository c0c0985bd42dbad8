#pragma once
// Runs a real command for integration tests: captures stdout/stderr, enforces a time limit.

#include <chrono>
#include <string>
#include <vector>

namespace ddp::test {

struct CommandResult {
  int exit_code = -1;   ///< the exit status, or 128+N when killed by signal N
  bool timed_out = false;
  double seconds = 0;
  std::string out;
  std::string err;
};

/// Runs argv (argv[0] looked up in PATH) with extra "KEY=VALUE" environment entries.
/// After `timeout` the process group gets SIGKILL and timed_out is set.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::duration<double> timeout = std::chrono::seconds(60),
                          const std::vector<std::string>& extra_env = {});

/// Runs `sh -c script`.
CommandResult run_shell(const std::string& script,
                        std::chrono::duration<double> timeout = std::chrono::seconds(60));

/// Whether a test may mount a tmpfs in a mount namespace of its own (`unshare -m`, as root): a
/// small disk to fill, a directory that differs between two "nodes".
bool can_mount_tmpfs();

/// Path of a built binary: build/bin/<name>.
std::string bin(const std::string& name);

/// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Whether a process with this pid exists (and is not a zombie).
bool process_alive(int pid);

/// Reads a whole file ("" if missing).
std::string read_file(const std::string& path);

/// Writes a whole file.
void write_file(const std::string& path, const std::string& content);

}  // namespace ddp::test

namespace ddp::test {

/// A TCP port that was free a moment ago (bind to 0, read it back, close).
int free_port();

/// Shell (ending in "; "): waits, up to `max_seconds`, until something accepts connections on
/// 127.0.0.1:`port`; say, the store of the launcher a test started first. A connection that sends
/// nothing is no request to a store. bash, since `sh` here is dash, which has no /dev/tcp.
std::string until_accepts(int port, int max_seconds = 60);

/// Shell (ending in "; "): runs `condition` (a shell command list) every 50 ms until it succeeds
/// or `max_seconds` pass, then goes on either way: the checks after it say what was missed, and a
/// test never hangs on a line that does not come. `$i` then holds the 50 ms ticks waited.
std::string until_true(const std::string& condition, int max_seconds = 60);

/// Shell: until_true that `files` (space-separated paths) hold `times` lines, in all, containing
/// `text` (a fixed string, without a single quote).
std::string until_logged(const std::string& files, const std::string& text, int max_seconds = 60, int times = 1);

/// Pids of live processes whose command line is exactly `argv` joined by spaces.
std::vector<int> find_processes(const std::string& command_line);

/// Number of lines of `text` equal to `line`.
int count_lines(const std::string& text, const std::string& line);

/// Number of places `part` starts in `text` (overlapping ones too).
int count_occurrences(const std::string& text, const std::string& part);

}  // namespace ddp::test
