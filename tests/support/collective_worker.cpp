// A worker for fault tests: five all-reduces over ddp-train's own communication layer, except that
// the rank named by --skip-rank skips all-reduce number --skip-at and then hangs (or, with --continue, goes on).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ddp/train/dist/collectives.h"
#include "ddp/train/dist/dist_env.h"
#include "ddp/train/dist/process_group.h"

int main(int argc, char** argv) {
  int skip_rank = -1, skip_at = -1;
  bool go_on = false;
  double timeout_s = 3;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--skip-rank") skip_rank = std::atoi(argv[++i]);
    if (arg == "--skip-at") skip_at = std::atoi(argv[++i]);
    if (arg == "--timeout") timeout_s = std::atof(argv[++i]);
    if (arg == "--continue") go_on = true;
  }
  try {
    ddp::DistEnv env = ddp::dist_env_from_environment();
    ddp::DistConfig config;
    config.timeout_s = timeout_s;
    ddp::Communicator comm = ddp::connect(env, config);
    for (int i = 1; i <= 5; ++i) {
      comm.tracker->set_step(i);
      if (env.rank == skip_rank && i == skip_at) {
        if (!go_on) std::this_thread::sleep_for(std::chrono::seconds(60));
        continue;
      }
      auto sum = ddp::all_reduce_sum(comm, torch::ones({4}, torch::kDouble));
      std::printf("all-reduce %d: %g\n", i, sum[0].item<double>());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_worker: %s\n", e.what());
    return 1;
  }
}
