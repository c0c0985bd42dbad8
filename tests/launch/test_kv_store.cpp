// The launcher's store client against a store host that freezes (Note [A frozen store host]): real
// processes over loopback, the host stopped with SIGSTOP as a frozen VM would be.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "ddp/launch/kv_store.h"
#include "support/subprocess.h"

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

}  // namespace

TEST_CASE("a client that gave up on a frozen store host outlives that host waking and going away",
          "[launch][store]") {
  // What a launcher meets when node 0 is stopped and then wakes and exits: the other nodes' clients,
  // connected before it froze or (taking the store over on one machine) to the frozen host itself,
  // must not take their launchers down. c10d's client has a thread of its own that throws, and so
  // ends the process, when its connection is reset.
  for (bool connects_while_stopped : {false, true}) {
    int port = free_port();
    pid_t host = host_store(port);
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
    close(to_client[0]);
    close(from_client[1]);
    struct Reaper {  // a failed REQUIRE leaves no process behind
      pid_t host;
      ~Reaper() { kill(host, SIGKILL), kill(host, SIGCONT); }
    } reaper{host};
    INFO((connects_while_stopped ? "connected to the stopped host" : "connected before the host stopped"));
    char done;
    if (read(from_client[0], &done, 1) != 1) FAIL("the client ended early, status " << exit_status(client));
    REQUIRE(kill(host, SIGSTOP) == 0);
    REQUIRE(write(to_client[1], "x", 1) == 1);
    if (read(from_client[0], &done, 1) != 1) FAIL("the client ended early, status " << exit_status(client));
    REQUIRE(kill(host, SIGKILL) == 0);  // it wakes only to go: connections it never took are reset
    exit_status(host);
    REQUIRE(write(to_client[1], "x", 1) == 1);
    CHECK(exit_status(client) == 0);
    close(to_client[1]);
    close(from_client[0]);
  }
}
