#pragma once
// What was built: printed by --version, recorded in config.yaml and TensorBoard's text tab.

#include <string>

namespace ddp {

/// "ddprun 0.1.0, LibTorch 1.13.1, CUDA no, NCCL no": the versions this binary was built with.
std::string version_line();

}  // namespace ddp
