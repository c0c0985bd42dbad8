#include "ddp/comm/process_group.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DDP_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "ddp/common/error.h"
#include "ddp/common/master_address.h"
#include "ddp/common/port_probe.h"
#include "ddp/comm/shm_allreduce.h"

namespace ddp {
namespace {

// Note [A rank started by hand says what it waits for]: without a launcher to name a rank that
// never came, ranks started by hand (or by srun alone) waited dist.timeout_s in silence, 30 minutes
// by default. One still meeting the others after `after` says so once, with what must match.
class WaitingNotice {
 public:
  WaitingNotice(std::string message, std::chrono::milliseconds after)
      : thread_([this, message = std::move(message), after] {
          std::unique_lock lock(mutex_);
          if (!done_changed_.wait_for(lock, after, [this] { return done_; })) spdlog::warn("{}", message);
        }) {}
  ~WaitingNotice() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_changed_.notify_all();
    thread_.join();
  }
  WaitingNotice(const WaitingNotice&) = delete;
  WaitingNotice& operator=(const WaitingNotice&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::thread thread_;  // last: it starts once the members it reads exist
};

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

std::shared_ptr<gloo::transport::Device> gloo_device(const WorkerIdentity& env) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  // One machine: keep the data connections on loopback, never on a public interface.
  if (env.local_world_size == env.world_size || is_loopback(env.master_addr))
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  // Under Slurm the node's own name: it is the hostname on most clusters, and where several nodes
  // share a host (containers, our local test cluster) it is still this node's address.
  if (const char* node = std::getenv("SLURMD_NODENAME"); node && *node) {
    try {
      return c10d::ProcessGroupGloo::createDeviceForHostname(node);
    } catch (const std::exception&) {
      // Not resolvable here: the hostname's address, as PyTorch does.
    }
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<CommBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          const std::shared_ptr<gloo::transport::Device>& device,
                                          std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(device);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

// Every rank's answer to `yes`, and-ed over the world: a choice of transport must be the same everywhere.
bool everyone(CommBackend& group, bool yes) {
  std::vector<torch::Tensor> flag{torch::tensor({yes ? 1 : 0}, torch::kInt32)};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MIN;
  group.allreduce(flag, options)->wait();
  return flag[0].item<int>() == 1;
}

// Gradients through shared memory: on one node among all ranks; across nodes per node, joined by a
// Gloo group of the nodes' leaders (Note [Hierarchical all-reduce]). Null where not every rank can.
std::shared_ptr<SharedMemoryAllReduce> connect_shared_memory(const Communicator& comm, const WorkerIdentity& env,
                                                             const std::shared_ptr<gloo::transport::Device>& device,
                                                             std::chrono::milliseconds timeout) {
  std::string why_not;
  if (env.local_world_size == env.world_size) {
    auto engine = SharedMemoryAllReduce::connect(*comm.store, env.rank, env.world_size, timeout, why_not);
    if (!engine && env.rank == 0)
      spdlog::warn("gradients go through Gloo: no shared memory for the all-reduce ({})", why_not);
    return engine;
  }
  // Nodes of equal size, ranks numbered node by node: what ddprun and Slurm's block distribution give.
  // Every rank takes part in this vote, whatever its own node looks like, or the ranks would not
  // agree on the collectives that follow.
  int local = env.local_world_size;
  bool blocked = local > 1 && env.node_rank >= 0 && env.world_size % local == 0 &&
                 env.rank == env.node_rank * local + env.local_rank;
  if (!everyone(*comm.group, blocked)) {
    if (env.rank == 0 && local > 1)
      spdlog::info("gradients go through Gloo alone: shared memory within nodes needs nodes of equal size with ranks "
                   "numbered node by node");
    return nullptr;
  }
  auto node_store = c10::make_intrusive<c10d::PrefixStore>("node_" + std::to_string(env.node_rank), comm.store);
  std::shared_ptr<SharedMemoryAllReduce> engine =
      SharedMemoryAllReduce::connect(*node_store, env.local_rank, local, timeout, why_not, env.rank - env.local_rank);
  if (!everyone(*comm.group, engine != nullptr)) {
    if (env.rank == 0)
      spdlog::warn("gradients go through Gloo: some node has no shared memory for the all-reduce{}",
                   engine ? "" : " (" + why_not + ")");
    return nullptr;
  }
  std::function<void(const torch::Tensor&)> leaders_sum;
  if (env.local_rank == 0) {
    auto leaders_store = c10::make_intrusive<c10d::PrefixStore>("leaders", comm.store);
    auto leaders = make_gloo(leaders_store, env.node_rank, env.world_size / local, device, timeout);
    leaders_sum = [leaders](const torch::Tensor& tensor) {
      std::vector<torch::Tensor> tensors{tensor};
      leaders->allreduce(tensors)->wait();
    };
  }
  engine->span_nodes(std::move(leaders_sum));
  return engine;
}

// What every rank must agree on before the process group exists, checked through the store against
// rank 0's: `what` is `mine` here; the error adds `fix`. Without it, ranks with different world sizes
// meet in Gloo's address exchange and fail there on a buffer size ("address.cc:45 136 vs 272"), and
// ranks with different backends (nodes with different GPU counts) never meet at all.
// `tell_rank_0`: a key under which this rank's value is left for rank 0 (wait_for_ranks), once it
// has rank 0's: rank 0, which hosts the store, may end on seeing it, and this rank still has its answer.
void check_same_as_rank_0(c10d::Store& store, const WorkerIdentity& env, const std::string& what, const std::string& mine,
                          const std::string& fix, const std::string& tell_rank_0 = "") {
  const std::string key = "ddp/" + what;
  if (env.rank == 0) {
    store.set(key, std::vector<uint8_t>(mine.begin(), mine.end()));
    return;
  }
  auto value = store.get(key);
  std::string theirs(value.begin(), value.end());
  if (!tell_rank_0.empty()) store.set(tell_rank_0, std::vector<uint8_t>(mine.begin(), mine.end()));
  if (theirs != mine)
    throw UserError("rank " + std::to_string(env.rank) + " was started with " + what + " " + mine + ", rank 0 with " +
                    theirs + "; " + fix);
}

// wait_for_ranks' own timeout, which has no lower cause to show.
constexpr const char* kRanksWaitedOut = "ranks waited out";

// Rank 0 of ranks started by hand reads each other rank's WORLD_SIZE as it arrives, so that one
// started with another is named at once, here too: Gloo would wait out dist.timeout_s for the rank
// that check_same_as_rank_0 ended, and then say "Socket Timeout". Returns once all have arrived;
// std::runtime_error at `timeout`, for the caller to name who did not.
void wait_for_ranks(c10d::Store& store, const WorkerIdentity& env, std::chrono::milliseconds timeout) {
  const std::string mine = std::to_string(env.world_size);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int r = 1; r < env.world_size; ++r) {
    const std::string key = "ddp/world_size/" + std::to_string(r);
    while (!store.check({key})) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error(kRanksWaitedOut);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    auto value = store.get(key);
    std::string theirs(value.begin(), value.end());
    if (theirs != mine)
      throw UserError("rank 0 was started with WORLD_SIZE " + mine + ", rank " + std::to_string(r) + " with " + theirs +
                      "; start every rank with the same world size (--world-size or $WORLD_SIZE)");
  }
}

}  // namespace

Communicator sub_communicator(const Communicator& world, const std::string& name, const std::vector<int>& ranks) {
  auto me = std::find(ranks.begin(), ranks.end(), world.rank);
  if (me == ranks.end())
    throw std::logic_error("sub_communicator " + name + ": rank " + std::to_string(world.rank) + " is not a member");
  Communicator group = world;
  group.rank = static_cast<int>(me - ranks.begin());
  group.world_size = static_cast<int>(ranks.size());
  group.shared_memory = nullptr;
  group.store = c10::make_intrusive<c10d::PrefixStore>("group/" + name, world.store);
  // Messages name world ranks and the trainer's step, which it sets on the world's tracker alone.
  std::vector<int> world_ranks;
  for (int r : ranks) world_ranks.push_back(world.tracker ? world.tracker->world_rank(r) : r);
  group.tracker = std::make_shared<CollectiveTracker>(group.store, group.rank, group.world_size, std::move(world_ranks),
                                                      world.tracker ? world.tracker->step_counter() : nullptr);
  group.group = world.make_group(group.store, group.rank, group.world_size);
  return group;
}

Placement resolve_placement(const DistConfig& config, int local_rank, int local_world_size) {
  int gpus = 0;
#ifdef DDP_WITH_CUDA
  if (config.device != "cpu" && torch::cuda::is_available()) gpus = static_cast<int>(torch::cuda::device_count());
#endif
  if (!config.devices.empty()) {
#ifndef DDP_WITH_CUDA
    throw ConfigError("dist.devices: CUDA devices need a CUDA build (cmake -DDDP_WITH_CUDA=ON against a CUDA "
                      "LibTorch); ranks as threads on the CPU are dist.threads (ddp-train --threads N)");
#endif
    const int64_t index = config.devices[static_cast<std::size_t>(std::max(0, local_rank)) % config.devices.size()];
    check_user(index < gpus, "dist.devices: device " + std::to_string(index) + " is not visible (" +
                                 std::to_string(gpus) + " GPU(s) are; check CUDA_VISIBLE_DEVICES)");
    Placement placement;
    placement.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
    placement.backend = config.backend != "auto" ? config.backend : "nccl";  // a device each, by the rule on dist.devices
    return placement;
  }
  if (config.device == "cuda") {
#ifndef DDP_WITH_CUDA
    throw ConfigError("dist.device: cuda needs a CUDA build (cmake -DDDP_WITH_CUDA=ON against a CUDA LibTorch)");
#endif
    check_user(gpus > 0, "dist.device: cuda, but no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)");
  }
  if (config.backend == "nccl") {
#ifndef DDP_WITH_CUDA
    throw ConfigError("dist.backend: nccl needs a CUDA build (cmake -DDDP_WITH_CUDA=ON against a CUDA LibTorch)");
#endif
    check_user(gpus > 0, "dist.backend: nccl needs a visible CUDA device, and none is");
    // NCCL fails obscurely ("Duplicate GPU detected") when two ranks share a device.
    check_user(local_world_size <= gpus,
               "dist.backend: nccl needs a GPU per rank, and this node runs " + std::to_string(local_world_size) +
                   " ranks on " + std::to_string(gpus) +
                   " GPU(s); use dist.backend=gloo (it sums CUDA tensors too) or fewer ranks per node");
  }
  Placement placement;
  if (gpus == 0) {
    placement.backend = "gloo";
    return placement;
  }
  placement.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::max(0, local_rank) % gpus));
  // An unknown rank count per node (ranks started by hand without LOCAL_WORLD_SIZE) may share GPUs.
  const bool gpu_per_rank = local_world_size > 0 && local_world_size <= gpus;
  placement.backend = config.backend != "auto" ? config.backend : gpu_per_rank ? "nccl" : "gloo";
  return placement;
}

namespace {
// The process group over comm.store (NCCL, or Gloo with shared memory for CPU tensors), into `comm`.
void connect_group(Communicator& comm, const WorkerIdentity& env, const DistConfig& config,
                   std::chrono::milliseconds timeout);
}  // namespace

Communicator connect(const WorkerIdentity& env, const DistConfig& config, c10::intrusive_ptr<c10d::Store> shared_store) {
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.timeout_s * 1000));
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.master_port);
  options.isServer = !env.launcher_store && env.rank == 0;
  options.waitWorkers = false;
  options.timeout = timeout;
  // Mode B under Slurm: the master is the job's first node by Slurm's name, which may not resolve.
  std::string master = env.master_addr;
  if (!shared_store && env.store_path.empty() && env.world_size > 1) {
    auto resolved = resolve_master_address(env.master_addr, "set MASTER_ADDR (or --master-addr) to an address of "
                                                            "rank 0's node that every rank can resolve");
    if (!resolved.note.empty()) spdlog::info("{}", resolved.note);
    master = resolved.address;
  }
  std::string endpoint = master + ":" + std::to_string(env.master_port);
  // A process alone in its world (ddp-train started by hand, a Slurm step of one task) meets nobody:
  // an in-process store, no port (was: a TCPStore on MASTER_PORT, 29500 by default, on every
  // interface, so that a second run beside it failed, and an unresolvable Slurm node name was
  // retried for dist.timeout_s).
  const bool alone = !shared_store && env.store_path.empty() && !env.launcher_store && env.world_size == 1;
  // The store is this process's own (ranks as threads, or one alone) or a file: no host to lose, nor to wait for.
  const bool own_store_only = shared_store || !env.store_path.empty() || alone;
  std::optional<WaitingNotice> waiting;
  if (!own_store_only && !env.launcher_store && env.world_size > 1) {
    const auto after = std::min<std::chrono::milliseconds>(std::chrono::seconds(10), timeout / 3);
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(after.count()) / 1000);
    waiting.emplace("rank " + std::to_string(env.rank) + ": still waiting after " + seconds + " s for all " +
                        std::to_string(env.world_size) + " ranks to meet at " + endpoint + " (dist.timeout_s " +
                        std::to_string(static_cast<int>(config.timeout_s)) +
                        " s): is every rank started, with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE?",
                    after);
  }

  // A port in use is found by binding it, before c10d, which would log its failed binds through
  // glog (raw lines before this one) and say it in words that differ between LibTorch versions.
  const bool hosts_store = !own_store_only && options.isServer;
  if (hosts_store && port_in_use(env.master_port))
    throw UserError("rank 0 cannot host the store at " + endpoint +
                    ": the port is in use (choose another --master-port or $MASTER_PORT)");
  c10::intrusive_ptr<c10d::Store> base_store;
  try {
    if (shared_store) {
      base_store = std::move(shared_store);
    } else if (alone) {
      base_store = c10::make_intrusive<c10d::HashStore>();
    } else if (!env.store_path.empty()) {
      auto file = env.store_path + "/attempt_" + std::to_string(env.round);
      base_store = c10::make_intrusive<c10d::FileStore>(file, env.world_size);
      base_store->setTimeout(timeout);
    } else {
      base_store = c10::make_intrusive<c10d::TCPStore>(master, options);
    }
  } catch (const std::exception& e) {
    std::string cause = e.what();
    cause = cause.substr(0, cause.find('\n'));
    if (options.isServer)
      throw UserError("rank 0 cannot host the store at " + endpoint + ": " + cause +
                      (port_in_use(env.master_port) ? " (the port is in use: choose another --master-port)"
                                                    : ""));  // taken just now
    throw UserError("rank " + std::to_string(env.rank) + " cannot reach the store at " + endpoint + " within " +
                    std::to_string(static_cast<int>(config.timeout_s)) + " s (is rank 0 running?): " + cause);
  }

  Communicator comm;
  // torch elastic's layout: a fresh key space per restart attempt (per round: the same but elastic).
  comm.store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.round),
                                                      base_store);
  // Each rank says it arrived, so that a rank left waiting can name the ones that did not; a second
  // process of the same rank (started by hand) finds it said, and is refused before it meets anyone.
  const std::string rank = std::to_string(env.rank);
  if (comm.store->add("ddp/arrived/" + rank, 1) > 1)
    throw UserError("rank " + rank + " was started twice: another process joined the store at " + endpoint +
                    " as rank " + rank + " first (or one of this rank that has since ended: start every rank "
                    "again); give each process a rank of its own, 0 to " + std::to_string(env.world_size - 1) +
                    " (--rank or $RANK)");
  const auto connecting_since = std::chrono::steady_clock::now();
  try {
    check_same_as_rank_0(*comm.store, env, "WORLD_SIZE", std::to_string(env.world_size),
                         "start every rank with the same world size (--world-size or $WORLD_SIZE)",
                         "ddp/world_size/" + rank);
    if (env.rank == 0 && !env.launcher_store && !own_store_only) wait_for_ranks(*comm.store, env, timeout);
    connect_group(comm, env, config, timeout);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    // c10d and Gloo say "Socket Timeout" and nothing of whom they waited for. Whether they waited the
    // whole dist.timeout_s is told by the clock, not by their words (which differ between versions).
    std::string cause = e.what();
    cause = cause.substr(0, cause.find('\n'));
    if (std::chrono::steady_clock::now() - connecting_since + std::chrono::milliseconds(50) < timeout) {
      // c10d's words ("Connection reset by peer") do not say who left, and Gloo's pairs say the same
      // of a peer rank: the store is the one that left only if it no longer answers.
      bool store_answers = true;
      try {
        comm.store->check({"ddp/arrived/" + std::to_string(env.rank)});
      } catch (const std::exception&) {
        store_answers = false;
      }
      if (store_answers || options.isServer || own_store_only) throw;
      throw std::runtime_error("the store at " + endpoint + " went away while rank " + std::to_string(env.rank) +
                               " met the others: " +
                               (env.launcher_store ? "its launcher" : "rank 0, which hosts it,") +
                               " stopped (see its output) [" + cause + "]");
    }
    std::string missing;
    int count = 0;
    for (int r = 0; r < env.world_size && count < 16; ++r) {
      bool arrived = false;
      try {
        arrived = comm.store->check({"ddp/arrived/" + std::to_string(r)});
      } catch (const std::exception&) {
      }
      if (!arrived) missing += (count++ ? ", " : "") + std::to_string(r);
    }
    if (missing.empty()) throw;
    throw std::runtime_error("rank(s) " + missing + " of " + std::to_string(env.world_size) +
                             " never arrived at the store at " + endpoint + " within " +
                             std::to_string(static_cast<int>(config.timeout_s)) +
                             " s (dist.timeout_s): did they start, with the same MASTER_ADDR, MASTER_PORT and "
                             "WORLD_SIZE?" + (cause == kRanksWaitedOut ? "" : " [" + cause + "]"));
  }
  return comm;
}

namespace {
void connect_group(Communicator& comm, const WorkerIdentity& env, const DistConfig& config,
                   std::chrono::milliseconds timeout) {
  comm.tracker = std::make_shared<CollectiveTracker>(comm.store, env.rank, env.world_size);
  Placement placement = resolve_placement(config, env.local_rank, env.local_world_size);
  check_same_as_rank_0(*comm.store, env, "backend", placement.backend + " on " + (placement.device.is_cuda() ? "cuda" : "cpu"),
                       "every node needs the same kind of device and, for nccl, a GPU per rank (set dist.device and "
                       "dist.backend explicitly)");
  comm.backend = placement.backend;
  comm.device = placement.device;
  comm.rank = env.rank;
  comm.world_size = env.world_size;
#ifdef DDP_WITH_CUDA
  // NCCL's own device guesses (barrier) and the caching allocator follow the current device.
  if (comm.device.is_cuda()) c10::cuda::set_device(comm.device.index());
  if (comm.backend == "nccl") {
    comm.collective_device = comm.device;
    // A hung collective aborts at dist.timeout_s rather than hangs, as torchrun's agent has it: the
    // name this LibTorch reads, unless either is set (2.2 and later read the first and warn of the
    // second; earlier ones read only the second). The launcher leaves it to ddp-train.
    // Once: ranks as threads connect at once, and the environment is no place for a race.
    static std::once_flag error_handling;
    std::call_once(error_handling, [] {
      if (!std::getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING") && !std::getenv("NCCL_ASYNC_ERROR_HANDLING"))
        setenv(TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
                   ? "TORCH_NCCL_ASYNC_ERROR_HANDLING"
                   : "NCCL_ASYNC_ERROR_HANDLING",
               "1", /*overwrite=*/0);
    });
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = timeout;
    comm.make_group = [nccl_options](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
      return c10::intrusive_ptr<CommBackend>(c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, nccl_options));
    };
    comm.group = comm.make_group(comm.store, env.rank, env.world_size);
    return;
  }
#endif
  if (comm.device.is_cuda() && env.rank == 0 && config.backend == "auto")
    spdlog::info("gradients go through Gloo: {}", env.local_world_size > 0 ? "ranks share GPUs, and NCCL needs a GPU per rank"
                                                                           : "LOCAL_WORLD_SIZE is unknown, so ranks may share GPUs "
                                                                             "(set it, or dist.backend=nccl)");
  auto device = gloo_device(env);
  comm.make_group = [device, timeout](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
    return make_gloo(store, rank, size, device, timeout);
  };
  comm.group = comm.make_group(comm.store, env.rank, env.world_size);
  // Shared memory sums CPU tensors; every rank decides alike, as every rank's placement is rank 0's.
  if (config.shared_memory && env.world_size > 1 && comm.device.is_cpu())
    comm.shared_memory = connect_shared_memory(comm, env, device, timeout);
}

}  // namespace

}  // namespace ddp
