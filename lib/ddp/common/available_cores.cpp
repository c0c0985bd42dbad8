#include "ddp/common/available_cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "ddp/common/worker_contract.h"

namespace ddp {
namespace {

// A positive count, or 0 for unset or anything else.
int count_of(const char* text) {
  if (!text || !*text) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value > 0 && value < (1 << 20) ? static_cast<int>(value) : 0;
}

}  // namespace

int available_cores_given(int affinity, const char* cpus_per_task, const char* cpus_on_node) {
  const int allocated = count_of(cpus_per_task) > 0 ? count_of(cpus_per_task) : count_of(cpus_on_node);
  return std::max(1, allocated > 0 ? std::min(affinity, allocated) : affinity);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int affinity = sched_getaffinity(0, sizeof set, &set) == 0
                           ? std::max(1, CPU_COUNT(&set))
                           : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return available_cores_given(affinity, std::getenv(slurm::kCpusPerTask), std::getenv(slurm::kCpusOnNode));
}

}  // namespace ddp
