// Which layers normalise by their batch's statistics (a resume at another grouping warns of them),
// and whether weights are all finite (a diverged checkpoint is passed over).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <limits>

#include "ddp/model/batch_statistics.h"
#include "ddp/model/finite_weights.h"
#include "ddp/model/sync_batchnorm.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

TEST_CASE("batch statistics: BatchNorm with and without running statistics, SyncBatchNorm, a scripted mirror",
          "[model][batchnorm]") {
  SECTION("none in a model of other norms") {
    torch::nn::Sequential model(torch::nn::Linear(4, 4), torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})),
                                torch::nn::InstanceNorm2d(4), torch::nn::GroupNorm(2, 4));
    CHECK_FALSE(batch_statistics_of(*model).any());
  }
  SECTION("a BatchNorm that keeps no running statistics still normalises by its batch") {
    torch::nn::Sequential model(torch::nn::Linear(4, 4),
                                torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(4).track_running_stats(false)));
    const BatchStatistics found = batch_statistics_of(*model);
    CHECK(found.first_layer == "1");
    CHECK_FALSE(found.all_synced);
  }
  SECTION("SyncBatchNorm alone is synced, beside a plain one is not") {
    torch::nn::Sequential synced(SyncBatchNorm2d(4, [](torch::Tensor t) { return t; }));
    CHECK(batch_statistics_of(*synced).all_synced);
    synced->push_back(torch::nn::BatchNorm2d(4));
    CHECK_FALSE(batch_statistics_of(*synced).all_synced);
  }
  SECTION("a TorchScript model's mirror carries the Python class name") {
    auto root = std::make_shared<torch::nn::Module>("Net");
    root->register_module("bn", std::make_shared<torch::nn::Module>("BatchNorm2d"));
    root->register_module("head", std::make_shared<torch::nn::Module>("MyBatchNormalizer"));
    CHECK(batch_statistics_of(*root).first_layer == "bn");
    // A Python subclass of nn.BatchNorm2d: its own class name, BatchNorm's running statistics.
    auto subclass = std::make_shared<torch::nn::Module>("Net");
    auto mine = subclass->register_module("norm", std::make_shared<torch::nn::Module>("MyBN"));
    mine->register_buffer("running_mean", torch::zeros({4}));
    CHECK(batch_statistics_of(*subclass).first_layer == "norm");
    CHECK_FALSE(batch_statistics_of(*subclass).all_synced);
  }
}

TEST_CASE("all_finite: NaN and infinity anywhere, empty and undefined tensors", "[model][finite]") {
  const auto nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(all_finite({}));
  CHECK(all_finite({torch::ones({3}), torch::Tensor(), torch::empty({0})}));
  CHECK_FALSE(all_finite({torch::ones({3}), torch::tensor({1.0f, nan})}));
  CHECK_FALSE(all_finite({torch::tensor({-inf}), torch::ones({2, 2})}));
  CHECK(all_finite({torch::arange(5)}));  // integer tensors are finite
}

}  // namespace DDP_TEST_FILE
