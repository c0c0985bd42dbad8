#include "ddp/comm/process_group.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DDP_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "ddp/common/error.h"
#include "ddp/comm/shm_allreduce.h"

namespace ddp {
namespace {

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

c10::intrusive_ptr<CommBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                                          std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME")) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  } else if (env.local_world_size == env.world_size || is_loopback(env.master_addr)) {
    // One machine: keep the data connections on loopback, never on a public interface.
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
}

// Ranks started by hand with different world sizes would otherwise meet in Gloo's address
// exchange and fail there on a buffer size ("address.cc:45 136 vs 272"). Rank 0's is the reference.
void check_world_size(c10d::Store& store, const DistEnv& env) {
  const std::string key = "ddp/world_size";
  std::string mine = std::to_string(env.world_size);
  if (env.rank == 0) {
    store.set(key, std::vector<uint8_t>(mine.begin(), mine.end()));
    return;
  }
  auto value = store.get(key);
  std::string theirs(value.begin(), value.end());
  if (theirs != mine)
    throw UserError("rank " + std::to_string(env.rank) + " was started with WORLD_SIZE " + mine + ", rank 0 with " +
                    theirs + "; start every rank with the same world size (--world-size or $WORLD_SIZE)");
}

}  // namespace

std::string resolve_backend(const std::string& requested) {
#ifdef DDP_WITH_CUDA
  bool gpu = torch::cuda::is_available();
#else
  bool gpu = false;
#endif
  if (requested == "gloo") return "gloo";
  if (requested == "nccl") {
#ifndef DDP_WITH_CUDA
    throw ConfigError("dist.backend: nccl needs a CUDA build (cmake -DDDP_WITH_CUDA=ON against a CUDA LibTorch)");
#endif
    check_user(gpu, "dist.backend: nccl needs a visible CUDA device, and none is");
    return "nccl";
  }
  return gpu ? "nccl" : "gloo";
}

Communicator connect(const DistEnv& env, const DistConfig& config) {
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.timeout_s * 1000));
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.master_port);
  options.isServer = !env.launcher_store && env.rank == 0;
  options.waitWorkers = false;
  options.timeout = timeout;
  std::string endpoint = env.master_addr + ":" + std::to_string(env.master_port);

  c10::intrusive_ptr<c10d::Store> base_store;
  try {
    if (!env.store_path.empty()) {
      auto file = env.store_path + "/attempt_" + std::to_string(env.restart_count);
      base_store = c10::make_intrusive<c10d::FileStore>(file, env.world_size);
      base_store->setTimeout(timeout);
    } else {
      base_store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    }
  } catch (const std::exception& e) {
    std::string cause = e.what();
    cause = cause.substr(0, cause.find('\n'));
    if (options.isServer)
      throw UserError("rank 0 cannot host the store at " + endpoint + ": " + cause +
                      (cause.find("in use") != std::string::npos ? " (choose another --master-port)" : ""));
    throw UserError("rank " + std::to_string(env.rank) + " cannot reach the store at " + endpoint + " within " +
                    std::to_string(static_cast<int>(config.timeout_s)) + " s (is rank 0 running?): " + cause);
  }

  Communicator comm;
  // torch elastic's layout: a fresh key space per restart attempt.
  comm.store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count),
                                                      base_store);
  check_world_size(*comm.store, env);
  comm.tracker = std::make_shared<CollectiveTracker>(comm.store, env.rank, env.world_size);
  comm.backend = resolve_backend(config.backend);
  comm.rank = env.rank;
  comm.world_size = env.world_size;
#ifdef DDP_WITH_CUDA
  if (comm.backend == "nccl") {
    // One device per local rank; NCCL's own device guesses (barrier) follow the current device.
    int device_index = std::max(0, env.local_rank) % static_cast<int>(torch::cuda::device_count());
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
    comm.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_index));
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = timeout;
    comm.group = c10::make_intrusive<c10d::ProcessGroupNCCL>(comm.store, env.rank, env.world_size, nccl_options);
    return comm;
  }
#endif
  comm.group = make_gloo(comm.store, env, timeout);
  if (config.shared_memory && env.world_size > 1 && env.local_world_size == env.world_size) {
    std::string why_not;
    comm.shared_memory = SharedMemoryAllReduce::connect(*comm.store, env.rank, env.world_size, timeout, why_not);
    if (!comm.shared_memory && env.rank == 0)
      spdlog::warn("gradients go through Gloo: no shared memory for the all-reduce ({})", why_not);
  }
  return comm;
}

}  // namespace ddp
