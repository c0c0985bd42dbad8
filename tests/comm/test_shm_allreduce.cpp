// The shared-memory all-reduce and its segment; ranks are threads here (the process tests are in
// test_faults.cpp and every single-node trainer test).
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ddp/comm/shared_segment.h"
#include "ddp/comm/shm_allreduce.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;
using ddp::SharedMemoryAllReduce;

namespace {

using Engines = std::vector<std::unique_ptr<SharedMemoryAllReduce>>;

// Connects `world` ranks, one thread each, through one in-memory store.
// `first_rank`: the job's rank of engine 0, as for a node other than the first.
Engines connect_all(int world, std::chrono::milliseconds timeout = std::chrono::seconds(20), int first_rank = 0) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Engines engines(world);
  std::vector<std::string> why_not(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back(
        [&, r] { engines[r] = SharedMemoryAllReduce::connect(*store, r, world, timeout, why_not[r], first_rank); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO(why_not[r]);
    REQUIRE(engines[r] != nullptr);
  }
  return engines;
}

// Runs `body(rank)` on one thread per rank.
void on_every_rank(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE("shared-memory sums equal the rank-order sum bit for bit on every rank, at any size", "[dist][shm]") {
  for (int world : {2, 3, 5}) {
    Engines engines = connect_all(world);
    // Sizes around the part alignment and the 64 Ki-float chunk, and several chunks; with and
    // without dividing first (exact by multiplication for 2, by division for 3 and 5).
    for (int64_t n : {1, 15, 17, 1000, 65535, 65536, 65537, 3 * 65536 + 100}) {
      for (float divisor : {1.0f, static_cast<float>(world)}) {
        std::vector<torch::Tensor> inputs, results;
        for (int r = 0; r < world; ++r) inputs.push_back(torch::randn({n}));
        torch::Tensor expected = inputs[0] / divisor;
        for (int r = 1; r < world; ++r) expected += inputs[r] / divisor;
        for (int r = 0; r < world; ++r) results.push_back(inputs[r].clone());
        on_every_rank(world, [&](int r) { engines[r]->sum(results[r], divisor); });
        for (int r = 0; r < world; ++r) {
          INFO("world " << world << ", " << n << " floats, divisor " << divisor << ", rank " << r);
          CHECK(torch::equal(results[r], expected));
        }
      }
    }
  }
}

TEST_CASE("shared-memory reduce-scatter gives each rank its part of sum()'s result, and all-gather puts the parts "
          "together, at any size",
          "[dist][shm][sharding]") {
  for (int world : {2, 3, 4}) {
    Engines engines = connect_all(world);
    // Shards around the round length (a slot's N-th) and the 64 Ki-float slot, and several rounds.
    for (int64_t shard : {1, 17, 16384, 21845, 65536, 65537, 2 * 65536 + 100}) {
      for (float divisor : {1.0f, static_cast<float>(world)}) {
        std::vector<torch::Tensor> inputs, summed, parts, gathered;
        for (int r = 0; r < world; ++r) {
          inputs.push_back(torch::randn({world * shard}));
          summed.push_back(inputs.back().clone());
          parts.push_back(torch::full({shard}, -7.0f));
          gathered.push_back(torch::zeros({world * shard}));
        }
        on_every_rank(world, [&](int r) {
          engines[r]->sum(summed[r], divisor);
          engines[r]->reduce_scatter(inputs[r], parts[r], divisor);
          engines[r]->all_gather(parts[r], gathered[r]);
        });
        for (int r = 0; r < world; ++r) {
          INFO("world " << world << ", shards of " << shard << " floats, divisor " << divisor << ", rank " << r);
          CHECK(torch::equal(parts[r], summed[r].narrow(0, r * shard, shard)));
          CHECK(torch::equal(gathered[r], summed[r]));
        }
      }
    }
  }
}

TEST_CASE("an all-gather in place (the shard a part of the whole) and queued jobs keep their order", "[dist][shm][sharding]") {
  Engines engines = connect_all(2);
  std::vector<torch::Tensor> full{torch::zeros({200}), torch::zeros({200})};
  on_every_rank(2, [&](int r) {
    full[r].narrow(0, r * 100, 100).fill_(static_cast<float>(r + 1));
    auto shard = full[r].narrow(0, r * 100, 100);
    auto first = engines[r]->run_async([&, r, shard] { engines[r]->all_gather(shard, full[r]); });
    auto second = engines[r]->sum_async(full[r]);  // after the gather: 2 × (1, 2)
    first->wait();
    second->wait();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(torch::equal(full[r].narrow(0, 0, 100), torch::full({100}, 2.0f)));
    CHECK(torch::equal(full[r].narrow(0, 100, 100), torch::full({100}, 4.0f)));
  }
}

TEST_CASE("sum_async runs queued sums in order on the communication thread", "[dist][shm]") {
  Engines engines = connect_all(2);
  std::vector<std::vector<torch::Tensor>> buffers(2);
  on_every_rank(2, [&](int r) {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int i = 0; i < 6; ++i) {
      buffers[r].push_back(torch::full({1000 * (i + 1)}, static_cast<float>(i + r)));
      works.push_back(engines[r]->sum_async(buffers[r].back()));
    }
    for (auto& work : works) work->wait();
  });
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 6; ++i) CHECK(torch::equal(buffers[r][i], torch::full({1000 * (i + 1)}, 2.0f * i + 1)));
}

TEST_CASE("a rank that never arrives fails the others after the time-out, and the engine stays failed", "[dist][shm]") {
  Engines engines = connect_all(2, std::chrono::milliseconds(300));
  auto values = torch::ones({100});
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(engines[0]->sum(values), Contains("the other ranks did not arrive within 0.3 s"));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  CHECK_THROWS_WITH(engines[0]->sum_async(values)->wait(), Contains("did not arrive"));
  CHECK_THROWS_WITH(engines[0]->sum(torch::ones({4}, torch::kDouble)), Contains("float32"));
}

TEST_CASE("a rank that exits is named at once, not after the time-out", "[dist][shm]") {
  Engines engines = connect_all(3, std::chrono::seconds(60));
  engines[2].reset();  // closes its descriptor: the kernel drops its lock, as when a process dies
  auto values = torch::ones({100});
  // The time-out's message would say "did not arrive": these name the exit.
  std::string rank1_error = "no error";  // Catch's checks are for the main thread: checked after the join
  std::thread rank1([&] {
    try {
      engines[1]->sum(values.clone());
    } catch (const std::exception& e) {
      rank1_error = e.what();
    }
  });
  CHECK_THROWS_WITH(engines[0]->sum(values), Contains("rank 2 exited while the others waited for it"));
  rank1.join();
  CHECK_THAT(rank1_error, Contains("rank 2 exited"));
  // On a node whose ranks are the job's 4 to 5, its rank 5 by that number (was: "rank 1").
  Engines second_node = connect_all(2, std::chrono::seconds(60), 4);
  second_node[1].reset();
  CHECK_THROWS_WITH(second_node[0]->sum(values), Contains("rank 5 exited while the others waited for it"));
}

TEST_CASE("when one rank cannot map the segment every rank gets nullptr and the reason", "[dist][shm]") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto set = [&](const std::string& key, const std::string& value) {
    store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  };
  set("shm_allreduce/name", "/ddprun-no-such-segment");  // as if rank 0 had made one
  set("shm_allreduce/rank_0", "ok");
  std::string why_not;
  CHECK(SharedMemoryAllReduce::connect(*store, 1, 2, std::chrono::seconds(5), why_not) == nullptr);
  CHECK_THAT(why_not, Contains("rank 1: cannot open shared memory /ddprun-no-such-segment"));
}

TEST_CASE("a shared segment maps the same memory by name until it is unlinked", "[dist][shm]") {
  auto created = ddp::SharedSegment::create(8192);
  auto opened = ddp::SharedSegment::open(created.name(), 8192);
  std::memcpy(created.data(), "hello", 6);
  CHECK(std::strcmp(static_cast<const char*>(opened.data()), "hello") == 0);
  CHECK_THROWS_WITH(ddp::SharedSegment::open(created.name(), 16384), Contains("smaller than"));
  created.unlink();
  CHECK_THROWS_WITH(ddp::SharedSegment::open(created.name(), 8192), Contains("No such file"));
  CHECK(std::strcmp(static_cast<const char*>(opened.data()), "hello") == 0);  // still mapped
}

TEST_CASE("a segment /dev/shm cannot hold, or a byte lock someone holds, is a clear error", "[dist][shm]") {
  CHECK_THROWS_WITH(ddp::SharedSegment::create(std::size_t{1} << 50), Contains("cannot reserve") && Contains("/ddprun-"));
  auto created = ddp::SharedSegment::create(8192);
  auto opened = ddp::SharedSegment::open(created.name(), 8192);
  created.lock_byte(0);
  CHECK(opened.is_locked(0));
  CHECK_FALSE(opened.is_locked(1));
  CHECK_THROWS_WITH(opened.lock_byte(0), Contains("cannot lock a byte of shared memory " + created.name()));
}

}  // namespace DDP_TEST_FILE
