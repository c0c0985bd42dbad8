#include "ddp/launch/store_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "ddp/common/text.h"

namespace ddp {
namespace {

const char* const kHungUp = "it hung up at once";

// A connected socket to one of host's addresses, or -1; bounded by `wait` per address.
int connect_within(const std::string& host, int port, std::chrono::milliseconds wait) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int connected = -1;
  for (addrinfo* a = found; a && connected < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      connected = fd;
      break;
    }
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof error;
    if (errno == EINPROGRESS && poll(&p, 1, static_cast<int>(wait.count())) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) {
      connected = fd;
      break;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return connected;
}

// Note [Asking a quiet service]: a c10d store never speaks first, and never answers a request it
// cannot parse: LibTorch 1.13's store closes the connection on an unknown query type ('G' is none),
// 2.x's reads nothing from a client until it sends the validation magic. Services that wait to be
// asked (HTTP, Redis, most text protocols) answer an HTTP request line, even if only with an error.
// So a reply to it names a foreign service, and a hang-up after it says nothing.
const char kQuestion[] = "GET / HTTP/1.0\r\n\r\n";

std::optional<std::string> first_line(int fd, const char* how) {
  char buffer[200];
  ssize_t n = read(fd, buffer, sizeof buffer);
  if (n <= 0) return std::nullopt;
  std::string text(buffer, static_cast<std::size_t>(n));
  return std::string(how) + " '" + printable(text.substr(0, text.find_first_of("\r\n")), 80) + "'";
}

std::optional<std::string> reply_once(const std::string& host, int port, std::chrono::milliseconds wait) {
  int fd = connect_within(host, port, wait);
  if (fd < 0) return std::nullopt;  // nothing listens yet: c10d's client retries until node 0 is up
  pollfd p{fd, POLLIN, 0};
  std::optional<std::string> reply;
  if (poll(&p, 1, static_cast<int>(wait.count())) == 1) {
    reply = first_line(fd, "it greeted with");
    if (!reply) reply = kHungUp;
  } else if (send(fd, kQuestion, sizeof kQuestion - 1, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof kQuestion - 1) &&
             poll(&p, 1, static_cast<int>(wait.count())) == 1) {
    reply = first_line(fd, "it answered an HTTP request with");
  }
  close(fd);
  return reply;
}

}  // namespace

std::optional<std::string> service_reply(const std::string& host, int port, std::chrono::milliseconds wait) {
  auto reply = reply_once(host, port, wait);
  // A store closing as its job ends hangs up on a late node once (its listener gone with the
  // connection in its backlog); a service that hangs up does so every time.
  if (reply && *reply == kHungUp) {
    std::this_thread::sleep_for(wait);
    reply = reply_once(host, port, wait);
  }
  return reply;
}

bool accepts_within(const std::string& host, int port, std::chrono::milliseconds within,
                    const std::function<bool()>& interrupted) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    int fd = connect_within(host, port, std::chrono::milliseconds(1000));
    if (fd >= 0) {
      close(fd);
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline || (interrupted && interrupted())) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace ddp
