// The parallel plan: the device mesh's arithmetic, and each rank's process group along each
// dimension, with four ranks as threads of this process meeting through a FileStore.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <array>
#include <thread>
#include <vector>

#include "ddp/comm/collectives.h"
#include "ddp/common/error.h"
#include "ddp/parallel/parallel_plan.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;
using ddp::MeshDim;

namespace {

std::string config_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

double sum_over(const ddp::Communicator& group, double value) {
  return ddp::all_reduce_sum(group, torch::tensor({value}, torch::kDouble)).item<double>();
}

}  // namespace

TEST_CASE("the mesh lays ranks out row-major, pipeline outermost, and names sizes that do not fit", "[parallel]") {
  ddp::MeshConfig config;
  config.pipeline = 2;
  config.data_shard = 2;
  auto mesh = ddp::DeviceMesh::from_config(config, 8);  // data_replicate 0: the 2 the others leave
  CHECK(mesh.describe() == "pipeline 2 × data_replicate 2 × data_shard 2");
  CHECK(mesh.world_size() == 8);
  // Rank 6 = pipeline 1, data_replicate 1, data_shard 0.
  CHECK(mesh.coordinate(6, MeshDim::kPipeline) == 1);
  CHECK(mesh.coordinate(6, MeshDim::kDataReplicate) == 1);
  CHECK(mesh.coordinate(6, MeshDim::kDataShard) == 0);
  CHECK(mesh.group_ranks(6, MeshDim::kPipeline) == std::vector<int>{2, 6});
  CHECK(mesh.group_ranks(6, MeshDim::kDataReplicate) == std::vector<int>{4, 6});
  CHECK(mesh.group_ranks(6, MeshDim::kDataShard) == std::vector<int>{6, 7});

  ddp::MeshConfig defaults;
  auto plain = ddp::DeviceMesh::from_config(defaults, 3);
  CHECK(plain.describe() == "pipeline 1 × data_replicate 3 × data_shard 1");
  CHECK(plain.group_ranks(1, MeshDim::kDataReplicate) == std::vector<int>{0, 1, 2});
  CHECK(plain.group_ranks(1, MeshDim::kPipeline) == std::vector<int>{1});

  // dist.data_shard 0 with sharding: the ranks of a node, replicated across nodes (HSDP).
  ddp::MeshConfig sharded;
  sharded.shard = "optimizer";
  CHECK(ddp::DeviceMesh::from_config(sharded, 8, 4).describe() == "pipeline 1 × data_replicate 2 × data_shard 4");
  CHECK(ddp::DeviceMesh::from_config(sharded, 8).describe() == "pipeline 1 × data_replicate 1 × data_shard 8");
  sharded.data_replicate = 4;
  CHECK(ddp::DeviceMesh::from_config(sharded, 8, 8).describe() == "pipeline 1 × data_replicate 4 × data_shard 2");
  CHECK(ddp::DeviceMesh::from_config(ddp::MeshConfig{}, 8, 4).describe() == "pipeline 1 × data_replicate 8 × data_shard 1");

  ddp::MeshConfig three;
  three.pipeline = 3;
  CHECK_THAT(config_error([&] { ddp::DeviceMesh::from_config(three, 4); }),
             Contains("dist.pipeline 3 × dist.data_shard 1 = 3 does not divide the world size 4"));
  ddp::MeshConfig explicit_sizes;
  explicit_sizes.pipeline = 2;
  explicit_sizes.data_replicate = 3;
  CHECK_THAT(config_error([&] { ddp::DeviceMesh::from_config(explicit_sizes, 4); }),
             Contains("= 6 ranks, but the world size is 4; the sizes must multiply to it"));
}

TEST_CASE("a 2 x 2 mesh of four ranks gives each rank its pipeline and data groups, and a collective in one "
          "group involves no other rank",
          "[parallel][dist]") {
  ddp::test::TempDir store;
  ddp::MeshConfig config;
  config.pipeline = 2;
  config.data_replicate = 2;
  constexpr int kWorld = 4;
  std::vector<std::vector<int>> pipeline_members(kWorld), data_members(kWorld);
  std::vector<double> pipeline_sum(kWorld), data_sum(kWorld), second_data_sum(kWorld, -1);
  std::vector<int> shard_size(kWorld), data_rank(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      try {
        ddp::ParallelPlan plan(ddp::test::connect_thread_rank(r, kWorld, store.path()), config, ddp::DistConfig{});
        pipeline_members[r] = plan.mesh().group_ranks(r, MeshDim::kPipeline);
        data_members[r] = plan.mesh().group_ranks(r, MeshDim::kDataReplicate);
        shard_size[r] = plan.group(MeshDim::kDataShard).world_size;
        data_rank[r] = plan.group(MeshDim::kDataReplicate).rank;
        data_sum[r] = sum_over(plan.group(MeshDim::kDataReplicate), r + 1);
        pipeline_sum[r] = sum_over(plan.group(MeshDim::kPipeline), r + 1);
        // Only the second data group sums again: the first one's ranks are not asked, and must
        // not be needed (they leave, destroying their groups).
        if (r >= 2) second_data_sum[r] = sum_over(plan.group(MeshDim::kDataReplicate), 10 * (r + 1));
        ddp::barrier(plan.group(MeshDim::kPipeline));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(errors[r].empty());
    CHECK(pipeline_members[r] == std::vector<int>{r % 2, r % 2 + 2});
    CHECK(data_members[r] == std::vector<int>{r / 2 * 2, r / 2 * 2 + 1});
    CHECK(shard_size[r] == 1);
    CHECK(data_rank[r] == r % 2);
  }
  // Each sum holds its own group's ranks' values and nobody else's.
  CHECK(data_sum == std::vector<double>{1 + 2, 1 + 2, 3 + 4, 3 + 4});
  CHECK(pipeline_sum == std::vector<double>{1 + 3, 2 + 4, 1 + 3, 2 + 4});
  CHECK(second_data_sum == std::vector<double>{-1, -1, 30 + 40, 30 + 40});
}

TEST_CASE("by default the plan is plain data parallelism: the data group is the world's own", "[parallel][dist]") {
  constexpr int kWorld = 2;
  std::array<bool, kWorld> same_group{}, trivial_pipeline{};  // one byte each: rank threads write them at once
  auto errors = ddp::test::run_ranks(kWorld, [&](int r, const ddp::Communicator& world) {
    ddp::ParallelPlan plan(world, ddp::MeshConfig{}, ddp::DistConfig{});
    same_group[r] = plan.group(MeshDim::kDataReplicate).group.get() == plan.world().group.get();
    trivial_pipeline[r] = plan.group(MeshDim::kPipeline).world_size == 1 && plan.mesh().size(MeshDim::kPipeline) == 1;
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
  CHECK(same_group == std::array<bool, kWorld>{true, true});
  CHECK(trivial_pipeline == std::array<bool, kWorld>{true, true});
}

}  // namespace DDP_TEST_FILE
