// Where a worker's tensors live and which backend sums them (dist.device, dist.backend).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ddp/comm/process_group.h"
#include "ddp/common/error.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

Placement place(const std::string& device, const std::string& backend, int local_rank = 0, int local_world = 1) {
  DistConfig config;
  config.device = device;
  config.backend = backend;
  return resolve_placement(config, local_rank, local_world);
}

bool have_gpu() {
#ifdef DDP_WITH_CUDA
  return torch::cuda::is_available();
#else
  return false;
#endif
}

}  // namespace

TEST_CASE("without a GPU, auto and cpu place on the CPU with Gloo", "[comm][placement]") {
  if (have_gpu()) {
    WARN("skipped: a GPU is visible, so auto places on it (see the [gpu] case)");
    return;
  }
  for (const std::string device : {"auto", "cpu"})
    for (const std::string backend : {"auto", "gloo"}) {
      Placement p = place(device, backend, 1, 2);
      CHECK(p.backend == "gloo");
      CHECK(p.device == torch::Device(torch::kCPU));
    }
}

TEST_CASE("a GPU asked for where there is none is one clear error", "[comm][placement][errors]") {
  if (have_gpu()) {
    WARN("skipped: a GPU is visible");
    return;
  }
#ifdef DDP_WITH_CUDA
  CHECK_THROWS_WITH(place("cuda", "auto"), Contains("dist.device: cuda, but no CUDA device is visible"));
  CHECK_THROWS_WITH(place("auto", "nccl"), Contains("dist.backend: nccl needs a visible CUDA device"));
#else
  CHECK_THROWS_AS(place("cuda", "auto"), ConfigError);
  CHECK_THROWS_WITH(place("cuda", "auto"),
                    "dist.device: cuda needs a CUDA build (cmake -DDDP_WITH_CUDA=ON against a CUDA LibTorch)");
  CHECK_THROWS_WITH(place("auto", "nccl"),
                    "dist.backend: nccl needs a CUDA build (cmake -DDDP_WITH_CUDA=ON against a CUDA LibTorch)");
#endif
}

TEST_CASE("on a GPU: NCCL with a GPU per rank, Gloo on CUDA tensors when ranks share one", "[comm][placement][gpu]") {
  if (!have_gpu()) {
    WARN("skipped: no CUDA device here (CPU build, or no GPU visible)");
    return;
  }
#ifdef DDP_WITH_CUDA
  const int gpus = static_cast<int>(torch::cuda::device_count());
  Placement one = place("auto", "auto", 0, 1);
  CHECK(one.backend == "nccl");
  CHECK(one.device == torch::Device(torch::kCUDA, 0));
  Placement shared = place("auto", "auto", gpus, gpus + 1);  // one rank more than there are GPUs
  CHECK(shared.backend == "gloo");
  CHECK(shared.device == torch::Device(torch::kCUDA, 0));
  Placement unknown = place("auto", "auto", 0, 0);  // started by hand without LOCAL_WORLD_SIZE: may share a GPU
  CHECK(unknown.backend == "gloo");
  CHECK(unknown.device == torch::Device(torch::kCUDA, 0));
  CHECK_THROWS_WITH(place("auto", "nccl", 0, gpus + 1), Contains("nccl needs a GPU per rank"));
  CHECK(place("cpu", "auto").device == torch::Device(torch::kCPU));
#endif
}

}  // namespace DDP_TEST_FILE
