#include "support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <algorithm>

extern char** environ;

namespace ddp::test {

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::duration<double> timeout,
                          const std::vector<std::string>& extra_env) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  std::vector<std::string> env_strings;
  // An extra entry replaces the inherited one of its name: getenv reads the first of duplicates.
  auto overridden = [&extra_env](const std::string& entry) {
    const std::string key = entry.substr(0, entry.find('=') + 1);
    for (const auto& kv : extra_env)
      if (kv.rfind(key, 0) == 0) return true;
    return false;
  };
  for (char** e = environ; *e; ++e)
    if (!overridden(*e)) env_strings.emplace_back(*e);
  for (const auto& kv : extra_env) env_strings.push_back(kv);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a time-out can kill everything it started
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execvpe(args[0], args.data(), envp.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);

  CommandResult result;
  std::string* sinks[2] = {&result.out, &result.err};
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[65536];
      ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, n);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  for (auto& fd : fds)
    if (fd.fd >= 0) close(fd.fd);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

CommandResult run_shell(const std::string& script, std::chrono::duration<double> timeout) {
  return run_command({"sh", "-c", script}, timeout);
}

std::string bin(const std::string& name) { return std::string(DDP_BIN_DIR) + "/" + name; }

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ddp-test-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

bool process_alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() && line[close_paren + 2] != 'Z';
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

}  // namespace ddp::test

#include <netinet/in.h>
#include <sys/socket.h>

namespace ddp::test {

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::vector<int> find_processes(const std::string& command_line) {
  std::vector<int> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
    int pid = std::stoi(name);
    if (cmdline == command_line && process_alive(pid)) pids.push_back(pid);
  }
  return pids;
}

bool can_mount_tmpfs() { return run_shell("unshare -m sh -c 'mount -t tmpfs tmpfs /mnt'").exit_code == 0; }

std::string until_accepts(int port, int max_seconds) {
  return until_true("bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) + "' 2>/dev/null", max_seconds);
}

std::string until_true(const std::string& condition, int max_seconds) {
  return "i=0; until { " + condition + "; } || [ $i -ge " + std::to_string(max_seconds * 20) +
         " ]; do sleep 0.05; i=$((i+1)); done; ";
}

std::string until_logged(const std::string& files, const std::string& text, int max_seconds, int times) {
  if (text.find('\'') != std::string::npos) throw std::invalid_argument("until_logged: a quote in '" + text + "'");
  return until_true(
      "[ $(cat " + files + " 2>/dev/null | grep -cF -- '" + text + "') -ge " + std::to_string(times) + " ]",
      max_seconds);
}

int count_lines(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  std::string current;
  int count = 0;
  while (std::getline(in, current)) count += current == line;
  return count;
}

int count_occurrences(const std::string& text, const std::string& part) {
  int count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

}  // namespace ddp::test
