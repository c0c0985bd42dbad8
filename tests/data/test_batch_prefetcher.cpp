#include <torch/torch.h>

#include "ddp/data/batch_prefetcher.h"
#include "ddp/data/synthetic_dataset.h"
#include "support/gpu.h"

#include <catch2/catch.hpp>

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

TEST_CASE("prefetched batches equal direct gathering, in order, from any start", "[data][prefetch]") {
  Dataset data = make_synthetic_dataset(1000, 10, 7);
  Normalizer normalizer{255.0, 0.5, 0.25};
  for (int64_t workers : {1, 3}) {
    DataConfig config;
    config.workers = workers;
    config.prefetch = 4;
    BatchPrefetcher prefetcher([&](const torch::Tensor& indices) { return gather_batch(data, indices, normalizer); },
                               config, torch::kCPU);
    for (int64_t first : {0, 5}) {
      auto indices = torch::randperm(1000, torch::kLong);
      prefetcher.start(indices, 64, first);
      for (int64_t b = first; b < 16; ++b) {  // 16 batches, the last one partial (1000 = 15·64 + 40)
        Batch got = prefetcher.next();
        Batch want = gather_batch(data, indices.slice(0, b * 64, std::min<int64_t>(1000, (b + 1) * 64)), normalizer);
        INFO("workers " << workers << " first " << first << " batch " << b);
        REQUIRE(got.inputs.size() == 1);
        REQUIRE(torch::equal(got.inputs[0], want.inputs[0]));
        REQUIRE(torch::equal(got.targets, want.targets));
      }
      CHECK_THROWS_AS(prefetcher.next(), std::logic_error);
    }
    // A new epoch mid-way drops what the old one had prepared.
    auto first_order = torch::arange(1000, torch::kLong);
    prefetcher.start(first_order, 100, 0);
    prefetcher.next();
    auto second_order = torch::arange(999, -1, -1, torch::kLong);
    prefetcher.start(second_order, 100, 0);
    CHECK(torch::equal(prefetcher.next().targets, data.labels.index_select(0, second_order.slice(0, 0, 100))));
  }
}

TEST_CASE("on a GPU: batches come out on the device, copied on a stream of their own, whole by the time a "
          "kernel the step queues at once reads them",
          "[data][prefetch][gpu]") {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  constexpr int64_t kWidth = int64_t{1} << 22;  // 16 MB a row: a copy long enough to race the step
  DataConfig config;
  config.workers = 2;
  config.prefetch = 3;
  BatchPrefetcher prefetcher(
      [&](const torch::Tensor& indices) {
        Batch batch;
        batch.inputs = {indices.to(torch::kFloat).unsqueeze(1).expand({indices.size(0), kWidth}).contiguous()};
        batch.targets = indices.clone();
        return batch;
      },
      config, gpu);
  auto order = torch::randperm(64, torch::kLong);
  prefetcher.start(order, 4, 0);
  for (int64_t b = 0; b < 16; ++b) {
    Batch got = prefetcher.next();
    REQUIRE(got.inputs[0].device() == gpu);
    REQUIRE(got.targets.device() == gpu);
    // Queued on the step's stream at once: without the wait for the copy it would read a part.
    const auto want = order.slice(0, b * 4, (b + 1) * 4);
    INFO("batch " << b);
    CHECK(got.inputs[0].sum().item<double>() == static_cast<double>(want.sum().item<int64_t>()) * kWidth);
    CHECK(torch::equal(got.targets.cpu(), want));
  }
}

}  // namespace DDP_TEST_FILE
