#pragma once
// Facts about this machine the launcher needs: cores, GPUs, host name, its own location.

#include <string>

#include "ddp/common/available_cores.h"

namespace ddp {

/// Visible CUDA devices, found without loading CUDA: the driver's device list, narrowed by
/// CUDA_VISIBLE_DEVICES when it is set.
int visible_gpu_count();

/// The devices a CUDA_VISIBLE_DEVICES value makes visible on a machine whose driver lists
/// `driver_gpus`, counted as CUDA counts them (up to the first entry that names no device).
int count_visible_devices(const std::string& cuda_visible_devices, int driver_gpus);

/// Intra-op threads per worker when the user did not choose: the cores, shared out.
int threads_per_worker(int local_workers);

/// This node's name: $SLURMD_NODENAME inside a Slurm job, else the hostname.
std::string host_name();

/// The directory of the running executable (to find ddp-train beside ddprun).
std::string executable_dir();

/// `name` resolved like execvp would: itself when it contains '/', else the first match in PATH.
/// Empty when there is no such executable.
std::string find_executable(const std::string& name);

}  // namespace ddp
