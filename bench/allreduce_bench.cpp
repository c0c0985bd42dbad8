// Gloo all-reduce microbenchmark over ddp-train's own process group: 1 KiB to 64 MiB, bus
// bandwidth beside a memcpy of the same size. Run under ddprun: ddprun --nproc-per-node 2 -- ddp-bench-allreduce
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ddp/train/dist/collectives.h"
#include "ddp/train/dist/dist_env.h"
#include "ddp/train/dist/process_group.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Repeats `op` until ~`budget_s` has passed (at least 3 times); returns seconds per call.
// Every rank must run the same count, so rank 0 decides it and broadcasts.
template <typename Op>
double time_collective(const ddp::Communicator& comm, Op op, double budget_s) {
  for (int i = 0; i < 2; ++i) op();  // warm-up: connections, buffers
  auto start = Clock::now();
  op();
  double once = seconds_since(start);
  auto count = torch::tensor({std::max(3.0, std::min(2000.0, budget_s / std::max(once, 1e-6)))}, torch::kDouble);
  ddp::broadcast_coalesced(comm, {count}, 0);
  int n = static_cast<int>(count.item<double>());
  ddp::barrier(comm);
  start = Clock::now();
  for (int i = 0; i < n; ++i) op();
  return seconds_since(start) / n;
}

double time_memcpy(std::size_t bytes, double budget_s) {
  // The destination sits 320 bytes off the source's alignment: equal low address bits would stall
  // the copy (4K aliasing) and understate memcpy.
  std::vector<char> from(bytes, 1), to(bytes + 320);
  char* target = to.data() + 320;
  std::memcpy(target, from.data(), bytes);  // fault the pages in
  // Clock reads are slow in some VMs: check the time once per batch of copies.
  int batch = static_cast<int>(std::max<std::size_t>(1, (1u << 22) / bytes));
  int n = 0;
  auto start = Clock::now();
  do {
    for (int i = 0; i < batch; ++i) std::memcpy(target, from.data(), bytes);
    n += batch;
  } while (seconds_since(start) < budget_s);
  return seconds_since(start) / n;
}

}  // namespace

int main() {
  try {
    ddp::Communicator comm = ddp::connect(ddp::dist_env_from_environment(), ddp::DistConfig{});
    const double world = comm.world_size;
    if (comm.rank == 0) {
      std::printf("Gloo all-reduce, %d ranks, float32 (bus bandwidth = 2(n-1)/n x bytes / time)\n", comm.world_size);
      std::printf("| size | time | bus bandwidth | memcpy | bus / memcpy |\n|---:|---:|---:|---:|---:|\n");
    }
    for (std::size_t bytes = 1024; bytes <= (64u << 20); bytes *= 4) {
      std::vector<torch::Tensor> buffer{torch::ones({static_cast<int64_t>(bytes / 4)})};
      double t = time_collective(comm, [&] { comm.group->allreduce(buffer)->wait(); }, 0.4);
      double bus = 2 * (world - 1) / world * bytes / t;
      double copy = bytes / time_memcpy(bytes, 0.1);
      if (comm.rank == 0) {
        const char* unit = bytes >= (1u << 20) ? "MiB" : "KiB";
        double size = bytes >= (1u << 20) ? bytes / 1048576.0 : bytes / 1024.0;
        std::printf("| %.0f %s | %.3f ms | %.2f GB/s | %.2f GB/s | %.2f |\n", size, unit, t * 1e3, bus / 1e9, copy / 1e9,
                    bus / copy);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-bench-allreduce: %s\n", e.what());
    return 1;
  }
}
