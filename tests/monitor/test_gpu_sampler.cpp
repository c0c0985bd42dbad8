// The GPU sampler: NVML, opened at run time.
#include <catch2/catch.hpp>

#include "ddp/monitor/gpu_sampler.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;

TEST_CASE("NVML is opened at run time: without the driver's library there is no GPU sampler, and no error",
          "[watch]") {
  auto sampler = ddp::GpuSampler::open(0);
  bool driver = run_shell("ldconfig -p | grep -q libnvidia-ml.so.1").exit_code == 0;
  if (!driver) {
    CHECK(sampler == nullptr);
    return;
  }
  WARN("libnvidia-ml.so.1 is here: checking a real reading");
  REQUIRE(sampler != nullptr);
  auto reading = sampler->sample();
  REQUIRE(reading);
  CHECK(reading->memory_total_mib > 0);
}

}  // namespace DDP_TEST_FILE
