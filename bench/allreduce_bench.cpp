// All-reduce microbenchmark over ddp-train's own communicator, 1 KiB to 64 MiB: Gloo, and the
// shared-memory all-reduce that gradients use on one node, with bus bandwidth beside a memcpy of
// the same size. Run under ddprun: ddprun --nproc-per-node 2 -- ddp-bench-allreduce
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/comm/collectives.h"
#include "ddp/comm/process_group.h"
#include "ddp/comm/shm_allreduce.h"
#include "ddp/common/worker_identity.h"

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

// printf's `format` of `value` as a string; empty when `show` is false.
std::string cell(bool show, const char* format, double value) {
  char text[32] = "";
  if (show) std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string format_size(std::size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

int main() {
  try {
    ddp::Communicator comm = ddp::connect(ddp::worker_identity_from_environment(), ddp::DistConfig{});
    const double world = comm.world_size;
    const bool shared = comm.shared_memory != nullptr;
    if (comm.rank == 0) {
      std::printf("All-reduce, %d ranks, float32; bus bandwidth = 2(n-1)/n x bytes / time; shared memory: %s\n\n",
                  comm.world_size, shared ? "the gradients' all-reduce on one node" : "not available");
      std::printf("| size | Gloo | shared memory | memcpy | Gloo bus bw | shm bus bw | Gloo / memcpy | shm / memcpy |\n");
      std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (std::size_t bytes = 1024; bytes <= (64u << 20); bytes *= 4) {
      std::vector<torch::Tensor> buffer{torch::ones({static_cast<int64_t>(bytes / 4)})};
      double gloo = time_collective(comm, [&] { comm.group->allreduce(buffer)->wait(); }, 0.4);
      // As the gradient reducer calls it: queued to the communication thread, then waited for.
      double shm = shared ? time_collective(comm, [&] { comm.shared_memory->sum_async(buffer[0])->wait(); }, 0.4) : 0;
      double copy = bytes / time_memcpy(bytes, 0.1);
      auto bus = [&](double t) { return 2 * (world - 1) / world * bytes / t; };
      if (comm.rank == 0) {
        std::printf("| %s | %.3f ms | %s | %.2f GB/s | %.2f GB/s | %s | %.2f | %s |\n", format_size(bytes).c_str(),
                    gloo * 1e3, cell(shared, "%.3f ms", shm * 1e3).c_str(), copy / 1e9, bus(gloo) / 1e9,
                    cell(shared, "%.2f GB/s", bus(shm) / 1e9).c_str(), bus(gloo) / copy,
                    cell(shared, "%.2f", bus(shm) / copy).c_str());
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-bench-allreduce: %s\n", e.what());
    return 1;
  }
}
