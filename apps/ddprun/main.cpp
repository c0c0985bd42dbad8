// ddprun: launches one worker per GPU or CPU slot with the torchrun environment and supervises them.
#include <cstdio>
#include <exception>

#include "ddp/common/error.h"
#include "ddp/common/worker_contract.h"
#include "ddp/launch/launch_options.h"
#include "ddp/launch/supervisor.h"

int main(int argc, char** argv) {
  try {
    auto options = ddp::parse_launch_options(argc, argv);
    if (!options) return ddp::kExitSuccess;
    return ddp::run_launcher(*options);
  } catch (const ddp::UserError& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return ddp::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun: internal error: %s\n", e.what());
    return ddp::kExitFailure;
  }
}
