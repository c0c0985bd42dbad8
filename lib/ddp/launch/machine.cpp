#include "ddp/launch/machine.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "ddp/common/hostname.h"
#include "ddp/common/text.h"

namespace ddp {

namespace {

// GPUs the driver lists, without loading CUDA.
int driver_gpu_count() {
  namespace fs = std::filesystem;
  std::error_code ec;
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)entry;
    ++count;
  }
  if (count > 0) return count;
  for (int i = 0; i < 64 && fs::exists("/dev/nvidia" + std::to_string(i)); ++i) ++count;
  return count;
}

}  // namespace

int count_visible_devices(const std::string& cuda_visible_devices, int driver_gpus) {
  // CUDA reads the list up to the first entry that names no device: empty, negative, an index
  // past the driver's devices, or neither an index nor a GPU-/MIG- UUID.
  int count = 0;
  for (const auto& entry : split(cuda_visible_devices, ',')) {
    auto index = parse_int(entry);
    bool uuid = entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0;
    bool valid = index ? *index >= 0 && *index < driver_gpus : uuid;
    if (!valid) break;
    ++count;
  }
  return std::min(count, driver_gpus);
}

int visible_gpu_count() {
  int driver_gpus = driver_gpu_count();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible ? count_visible_devices(visible, driver_gpus) : driver_gpus;
}

std::string host_name() {
  // Several Slurm nodes may share one hostname (containers, or tests' local clusters); the node
  // name is what the job's own output and `squeue` call them.
  if (const char* node = std::getenv("SLURMD_NODENAME"); node && *node) return printable(node, 64);
  return hostname();
}

std::string executable_dir() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

std::string find_executable(const std::string& name) {
  auto executable = [](const std::string& path) {
    return access(path.c_str(), X_OK) == 0 && !std::filesystem::is_directory(path);
  };
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  for (const auto& dir : split(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return "";
}

int threads_per_worker(int local_workers) { return std::max(1, available_cores() / local_workers); }

}  // namespace ddp
