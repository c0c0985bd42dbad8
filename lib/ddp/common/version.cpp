#include "ddp/common/version.h"

// Set for this file alone by lib/CMakeLists.txt, from the project and the LibTorch found at configure
// time, so that the launcher (which links no LibTorch) reports the same LibTorch as the trainer.
#ifndef DDP_VERSION
#error "DDP_VERSION must be defined by the build"
#endif

namespace ddp {

std::string version_line() {
  // NCCL comes with the CUDA build: c10d's ProcessGroupNCCL is what DDP_WITH_CUDA compiles in.
  const char* cuda = DDP_CUDA_BUILD ? "yes" : "no";
  return std::string("ddprun ") + DDP_VERSION + ", LibTorch " + DDP_TORCH_VERSION + ", CUDA " + cuda + ", NCCL " + cuda;
}

}  // namespace ddp
