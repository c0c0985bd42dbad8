#pragma once
// Ranks as threads of the test process, meeting through a FileStore: the cheap way to test an
// engine's collectives in-process (pytorch's ProcessGroupGlooTest; STYLE.md "Tests, again").

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddp/comm/process_group.h"
#include "support/subprocess.h"

namespace ddp::test {

/// Rank `rank` of `world_size`, all in this process, meeting through a FileStore in `store_dir`.
inline Communicator connect_thread_rank(int rank, int world_size, const std::string& store_dir) {
  WorkerIdentity env;
  env.rank = rank;
  env.world_size = env.local_world_size = world_size;
  env.store_path = store_dir;
  DistConfig config;
  config.shared_memory = false;
  config.timeout_s = 20;  // a collective that waited for a rank outside its group would fail, not hang
  return connect(env, config);
}

/// Runs `body(rank, group)` on `world_size` threads, each its own rank of one Gloo group; returns
/// each rank's error ("" for none), so that a rank that throws fails the test, named. No rank's
/// group goes before every rank ended (up to a minute), whether it threw or not: a rank whose body
/// ended at once would close its connections while a starved peer still made its own, failing that
/// peer's connect with no cause of the test's (a refusal checked on rank 0 came back "" in CI).
inline std::vector<std::string> run_ranks(int world_size,
                                          const std::function<void(int rank, const Communicator& group)>& body) {
  TempDir store;
  std::vector<std::string> errors(static_cast<std::size_t>(world_size));
  std::atomic<int> ended{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      std::optional<Communicator> group;
      try {
        group = connect_thread_rank(r, world_size, store.path());
        body(r, *group);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
      ++ended;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (ended.load() < world_size && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
  for (auto& thread : threads) thread.join();
  return errors;
}

}  // namespace ddp::test
