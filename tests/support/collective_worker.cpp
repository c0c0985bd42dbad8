// A worker for fault tests: five all-reduces over ddp-train's own communication layer, except that
// the rank named by --skip-rank skips all-reduce number --skip-at and then hangs (or, with --continue,
// goes on; with --exit, exits 0).
// With --shared-memory the all-reduces go through the gradients' shared-memory path, and grow
// across several of its chunks. With --group-stride K they run in sub-groups of the ranks equal
// modulo K (as a mesh dimension's groups), the step set on the world's tracker as the trainer does.
// With --ready-dir DIR the ranks wait (up to a minute) until each has made its file there before
// they connect: --timeout bounds the meeting too, and processes loading LibTorch on a busy machine
// may start seconds apart.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "ddp/comm/collectives.h"
#include "ddp/comm/process_group.h"
#include "ddp/comm/shm_allreduce.h"
#include "ddp/common/worker_identity.h"

namespace {

// All-reduce number `i` on the shared-memory path, tracked as the gradient reducer does; returns the
// sum if every element agrees, else NaN.
double shared_memory_sum(const ddp::Communicator& comm, int i) {
  if (!comm.shared_memory) throw std::runtime_error("no shared-memory all-reduce on a single-node run");
  auto values = torch::ones({i * 40000 + 3});
  int64_t seq = comm.tracker->begin("gradient all_reduce");
  comm.tracker->wait(comm.shared_memory->sum_async(values), seq);
  double first = values[0].item<double>();
  return (values == first).all().item<bool>() ? first : std::nan("");
}

}  // namespace

int main(int argc, char** argv) {
  int skip_rank = -1, skip_at = -1;
  int group_stride = 0;
  bool go_on = false, exit_early = false, shared_memory = false;
  double timeout_s = 3;
  std::string ready_dir;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--skip-rank") skip_rank = std::atoi(argv[++i]);
    if (arg == "--skip-at") skip_at = std::atoi(argv[++i]);
    if (arg == "--timeout") timeout_s = std::atof(argv[++i]);
    if (arg == "--continue") go_on = true;
    if (arg == "--exit") exit_early = true;
    if (arg == "--shared-memory") shared_memory = true;
    if (arg == "--group-stride") group_stride = std::atoi(argv[++i]);
    if (arg == "--ready-dir") ready_dir = argv[++i];
  }
  try {
    ddp::WorkerIdentity env = ddp::worker_identity_from_environment();
    if (!ready_dir.empty()) {
      std::ofstream(ready_dir + "/" + std::to_string(env.rank));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (std::distance(std::filesystem::directory_iterator(ready_dir), {}) < env.world_size &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ddp::DistConfig config;
    config.timeout_s = timeout_s;
    ddp::Communicator world = ddp::connect(env, config);
    ddp::Communicator comm = world;
    if (group_stride > 0) {
      std::vector<int> members;
      for (int r = env.rank % group_stride; r < env.world_size; r += group_stride) members.push_back(r);
      comm = ddp::sub_communicator(world, "stride" + std::to_string(env.rank % group_stride), members);
    }
    for (int i = 1; i <= 5; ++i) {
      world.tracker->set_step(i);
      if (env.rank == skip_rank && i == skip_at) {
        if (exit_early) return 0;
        if (!go_on) std::this_thread::sleep_for(std::chrono::seconds(60));
        continue;
      }
      double sum = shared_memory ? shared_memory_sum(comm, i)
                                 : ddp::all_reduce_sum(comm, torch::ones({4}, torch::kDouble))[0].item<double>();
      std::printf("all-reduce %d: %g\n", i, sum);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_worker: %s\n", e.what());
    return 1;
  }
}
