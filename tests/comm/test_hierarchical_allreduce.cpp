// Sums across nodes: shared memory within each node, Gloo between the nodes' leaders (Note
// [Hierarchical all-reduce]). Four ranks as threads of this process, as two "nodes" of two.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <array>
#include <thread>
#include <vector>

#include "ddp/comm/process_group.h"
#include "ddp/comm/shm_allreduce.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

constexpr int kWorld = 4, kPerNode = 2;

ddp::Communicator connect_rank(int rank, int node_rank, const std::string& store_dir) {
  ddp::WorkerIdentity env;
  env.rank = rank;
  env.world_size = kWorld;
  env.local_world_size = kPerNode;
  env.local_rank = rank % kPerNode;
  env.node_rank = node_rank;
  env.store_path = store_dir;
  return ddp::connect(env, ddp::DistConfig{});
}

// What each rank contributes: distinct values whose float sums depend on the order of addition.
torch::Tensor values_of(int rank, int64_t n) {
  return torch::randn({n}, torch::TensorOptions().dtype(torch::kFloat32)).mul_(std::pow(10.0f, rank)).add_(0.1f * rank);
}

}  // namespace

TEST_CASE("across two nodes every rank gets (x0/4 + x1/4) + (x2/4 + x3/4) bit for bit", "[dist][shm]") {
  ddp::test::TempDir store;
  // Past one 64 Ki-float chunk, and an odd length that splits unevenly over the ranks.
  const std::vector<int64_t> sizes{1, 1000, 64 * 1024 + 37};
  torch::manual_seed(3);
  std::vector<std::vector<torch::Tensor>> inputs(kWorld);
  for (int r = 0; r < kWorld; ++r)
    for (auto n : sizes) inputs[r].push_back(values_of(r, n));
  std::vector<std::vector<torch::Tensor>> results(kWorld);
  std::array<bool, kWorld> engaged{};  // one byte each: rank threads write them at once
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      auto comm = connect_rank(r, r / kPerNode, store.path());
      engaged[r] = comm.shared_memory != nullptr;
      if (!comm.shared_memory) return;
      for (const auto& input : inputs[r]) {
        auto tensor = input.clone();
        comm.shared_memory->sum_async(tensor, kWorld)->wait();
        results[r].push_back(tensor);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) REQUIRE(engaged[r]);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto& x = inputs;
    // Each node sums its ranks in rank order; the two leaders' sums are then added (commutative).
    auto node0 = x[0][i] / kWorld + x[1][i] / kWorld;
    auto node1 = x[2][i] / kWorld + x[3][i] / kWorld;
    auto expected = node0 + node1;
    for (int r = 0; r < kWorld; ++r) {
      INFO("size " << sizes[i] << ", rank " << r);
      CHECK(torch::equal(results[r][i], expected));
    }
  }
}

TEST_CASE("ranks not numbered node by node make every rank fall back to Gloo, none to shared memory", "[dist][shm]") {
  ddp::test::TempDir store;
  std::vector<int> engaged(kWorld, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      // Cyclic placement: ranks 0 and 2 on node 0, 1 and 3 on node 1.
      ddp::WorkerIdentity env;
      env.rank = r;
      env.world_size = kWorld;
      env.local_world_size = kPerNode;
      env.local_rank = r / 2;
      env.node_rank = r % 2;
      env.store_path = store.path();
      auto comm = ddp::connect(env, ddp::DistConfig{});
      engaged[r] = comm.shared_memory != nullptr;
      // Gloo still works for everyone.
      std::vector<torch::Tensor> one{torch::ones({3})};
      comm.group->allreduce(one)->wait();
      if (one[0][0].item<float>() != kWorld) engaged[r] = 2;
    });
  for (auto& t : threads) t.join();
  CHECK(engaged == std::vector<int>(kWorld, 0));
}

TEST_CASE("nodes of different sizes (2 ranks and 1) agree on Gloo alone, with no rank left in a vote", "[dist][shm]") {
  ddp::test::TempDir store;
  std::vector<int> engaged(3, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      ddp::WorkerIdentity env;
      env.rank = r;
      env.world_size = 3;
      env.local_world_size = r < 2 ? 2 : 1;
      env.local_rank = r < 2 ? r : 0;
      env.node_rank = r < 2 ? 0 : 1;
      env.store_path = store.path();
      auto comm = ddp::connect(env, ddp::DistConfig{});
      engaged[r] = comm.shared_memory != nullptr;
      std::vector<torch::Tensor> one{torch::ones({3})};
      comm.group->allreduce(one)->wait();  // the first collective after the vote: matched everywhere
      if (one[0][0].item<float>() != 3) engaged[r] = 2;
    });
  for (auto& t : threads) t.join();
  CHECK(engaged == std::vector<int>(3, 0));
}

}  // namespace DDP_TEST_FILE
