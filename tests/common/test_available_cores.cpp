// The cores a launcher splits among its workers: the affinity mask, within Slurm's allocation.
#include <catch2/catch.hpp>

#include "ddp/common/available_cores.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

TEST_CASE("available cores: the affinity mask, capped by Slurm's CPUs for the task or else the node",
          "[common][cores]") {
  CHECK(available_cores_given(16, nullptr, nullptr) == 16);
  CHECK(available_cores_given(16, "4", nullptr) == 4);  // srun -c 4 on a cluster that binds nothing
  CHECK(available_cores_given(16, nullptr, "6") == 6);
  CHECK(available_cores_given(16, "4", "6") == 4);     // the task's, not the job's on the node
  CHECK(available_cores_given(2, "8", nullptr) == 2);  // a mask narrower than the allocation
  for (const char* bad : {"", "0", "-3", "4x", "99999999999"}) {
    INFO(bad);
    CHECK(available_cores_given(16, bad, nullptr) == 16);
  }
  CHECK(available_cores() >= 1);
}

}  // namespace DDP_TEST_FILE
