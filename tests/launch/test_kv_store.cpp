// The launcher's store client: against a store host that freezes (Note [A frozen store host]), the
// host stopped with SIGSTOP as a frozen VM would be, and the kinds of its errors. Real processes
// over loopback.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "ddp/launch/kv_store.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

// A child process that hosts a store on `port` until it is killed; returns once it listens.
pid_t host_store(int port) {
  int listening[2];
  REQUIRE(pipe(listening) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    try {
      ddp::KvStoreOptions options{"127.0.0.1", port, true, 30s};
      auto store = ddp::open_tcp_store(options);
      store->set("ready", "1");
      if (write(listening[1], "x", 1) != 1) _exit(2);
      for (;;) pause();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "store host: %s\n", e.what());
      _exit(1);
    }
  }
  close(listening[1]);
  char ready;
  bool listens = read(listening[0], &ready, 1) == 1;
  close(listening[0]);
  REQUIRE(listens);
  return pid;
}

// Waits for a child and returns its exit status, or 128+N for signal N.
int exit_status(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// One case's child processes and pipe ends: killed, reaped and closed however the case ends.
struct Leftovers {
  std::vector<pid_t> children;
  std::vector<int> fds;
  ~Leftovers() {
    for (pid_t pid : children) kill(pid, SIGKILL), waitpid(pid, nullptr, 0);
    for (int fd : fds) close(fd);
  }
  // Waits for a child, no longer left over.
  int reap(pid_t pid) {
    std::erase(children, pid);
    return exit_status(pid);
  }
};

}  // namespace

TEST_CASE("a client that gave up on a frozen store host outlives that host waking and going away",
          "[launch][store]") {
  // What a launcher meets when node 0 is stopped and then wakes and exits: the other nodes' clients,
  // connected before it froze or (taking the store over on one machine) to the frozen host itself,
  // must not take their launchers down. c10d's client has a thread of its own that throws, and so
  // ends the process, when its connection is reset: that happens to the connections the stopped
  // host never took (the second case; the first, whose connections get an orderly close, is kept
  // for the client that outlives its host's going in any way).
  for (bool connects_while_stopped : {false, true}) {
    Leftovers leftovers;
    int port = free_port();
    pid_t host = host_store(port);
    leftovers.children.push_back(host);
    int to_client[2], from_client[2];
    REQUIRE(pipe(to_client) == 0);
    REQUIRE(pipe(from_client) == 0);
    pid_t client = fork();
    if (client == 0) {
      int code = 0;
      try {
        ddp::KvStoreOptions options{"127.0.0.1", port, false, 30s, 1s};
        char go;
        std::unique_ptr<ddp::KvStore> store;
        if (!connects_while_stopped) {
          store = ddp::open_tcp_store(options);
          store->wait({"ready"}, 30s);
        }
        if (write(from_client[1], "x", 1) != 1) _exit(9);  // ready for the host to stop
        if (read(to_client[0], &go, 1) != 1) _exit(10);  // the host is stopped now
        if (connects_while_stopped) store = ddp::open_tcp_store(options);  // the kernel accepts for it
        try {
          store->add("counter", 1);
          code = 11;  // a stopped host cannot have answered
        } catch (const ddp::StoreNotAnswering&) {
        }
        try {
          store->check({"ready"});
          code = 12;  // every later call fails at once
        } catch (const ddp::StoreNotAnswering&) {
        }
        if (write(from_client[1], "x", 1) != 1) _exit(13);
        if (read(to_client[0], &go, 1) != 1) _exit(14);  // the host has gone
        std::this_thread::sleep_for(2s);                 // time for any reaction to its going
      } catch (const std::exception& e) {
        std::fprintf(stderr, "client: %s\n", e.what());
        _exit(15);
      }  // the store is let go, as the launcher does when it moves on
      std::this_thread::sleep_for(1s);
      _exit(code);
    }
    leftovers.children.push_back(client);
    close(to_client[0]);
    close(from_client[1]);
    leftovers.fds = {to_client[1], from_client[0]};
    INFO((connects_while_stopped ? "connected to the stopped host" : "connected before the host stopped"));
    char done;
    if (read(from_client[0], &done, 1) != 1) FAIL("the client ended early, status " << leftovers.reap(client));
    REQUIRE(kill(host, SIGSTOP) == 0);
    REQUIRE(write(to_client[1], "x", 1) == 1);
    if (read(from_client[0], &done, 1) != 1) FAIL("the client ended early, status " << leftovers.reap(client));
    REQUIRE(kill(host, SIGKILL) == 0);  // it wakes only to go: connections it never took are reset
    leftovers.reap(host);
    REQUIRE(write(to_client[1], "x", 1) == 1);
    CHECK(leftovers.reap(client) == 0);
  }
}

TEST_CASE("store errors say their cause by kind: a port in use, a wait that ran out, a host not there or gone",
          "[launch][store]") {
  using Kind = ddp::StoreError::Kind;
  auto kind_of = [](const std::function<void()>& call) -> std::optional<Kind> {
    try {
      call();
    } catch (const ddp::StoreError& e) {
      UNSCOPED_INFO("StoreError " << static_cast<int>(e.kind()) << ": " << e.what());
      return e.kind();
    }
    return std::nullopt;
  };
  const int port = free_port();
  auto host = ddp::open_tcp_store({"127.0.0.1", port, true, 30s});
  // Another host on the same port.
  CHECK(kind_of([&] { ddp::open_tcp_store({"127.0.0.1", port, true, 30s}); }) == Kind::kPortInUse);
  // A key nobody sets; a host nobody runs (c10d gives up connecting before its timeout when the
  // next try would not fit in it: not a wait that ran out).
  auto client = ddp::open_tcp_store({"127.0.0.1", port, false, 1s});
  CHECK(kind_of([&] { client->get("never"); }) == Kind::kTimedOut);
  CHECK(kind_of([&] { client->wait({"never"}, 1s); }) == Kind::kTimedOut);
  CHECK(kind_of([&] { ddp::open_tcp_store({"127.0.0.1", free_port(), false, 1s}); }) == Kind::kFailed);
  // A host that went away: the next call fails at once, not as a timeout.
  const int gone_port = free_port();
  Leftovers leftovers;
  pid_t gone = host_store(gone_port);
  leftovers.children.push_back(gone);
  auto orphan = ddp::open_tcp_store({"127.0.0.1", gone_port, false, 30s});
  orphan->set("before", "1");
  REQUIRE(kill(gone, SIGKILL) == 0);
  leftovers.reap(gone);
  CHECK(kind_of([&] { orphan->add("after", 1); }) == Kind::kFailed);
  CHECK(kind_of([&] { host->set("fine", "1"); }) == std::nullopt);
}

}  // namespace DDP_TEST_FILE
