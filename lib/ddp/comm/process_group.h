#pragma once
// Joining the rendezvous and making the c10d process group (Gloo on CPU, NCCL on CUDA builds).

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/types.h>
#include <torch/version.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/comm/collective_tracker.h"
#include "ddp/comm/dist_config.h"
#include "ddp/common/worker_identity.h"

namespace ddp {

class SharedMemoryAllReduce;

/// The class ProcessGroupGloo and ProcessGroupNCCL derive from: ProcessGroup in LibTorch 1.x, Backend in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

/// The communication handles of one worker.
struct Communicator {
  c10::intrusive_ptr<c10d::Store> store;  ///< prefixed per restart attempt
  c10::intrusive_ptr<CommBackend> group;
  std::shared_ptr<CollectiveTracker> tracker;  ///< every collective goes through it
  /// Gradient sums through shared memory on the CPU: among every rank when all are on this node, or
  /// per node with leaders across nodes (Note [Hierarchical all-reduce]); null when not every rank can.
  std::shared_ptr<SharedMemoryAllReduce> shared_memory;
  std::string backend;  ///< "gloo" or "nccl"
  torch::Device device = torch::kCPU;  ///< the model's and the batches' (dist.device)
  /// Where the backend wants the small collectives' tensors: the GPU for NCCL; the CPU for Gloo,
  /// which sums CUDA tensors (the gradients) by copying them through the host anyway.
  torch::Device collective_device = torch::kCPU;
  int rank = 0;
  int world_size = 1;
  /// A process group of the same backend and transport over another store: for sub-groups.
  std::function<c10::intrusive_ptr<CommBackend>(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)>
      make_group;
};

/// Where a worker's tensors live and which backend sums them.
struct Placement {
  std::string backend;                 ///< "gloo" or "nccl"
  torch::Device device = torch::kCPU;  ///< cpu, or cuda:LOCAL_RANK modulo the visible GPUs
};

/// What `dist.device` and `dist.backend` resolve to for local rank `local_rank` of `local_world_size`
/// (0: unknown) on this build and machine; ConfigError or UserError if it cannot be had.
Placement resolve_placement(const DistConfig& config, int local_rank, int local_world_size);

/// The communicator of the ranks `ranks` of `world` (ascending, `world.rank` among them), for the
/// group called `name` (unique to it: the key space it meets in). Every member must call it; other
/// ranks need not. The shared-memory path stays the world's.
Communicator sub_communicator(const Communicator& world, const std::string& name, const std::vector<int>& ranks);

/// Connects to (or, as rank 0 started by hand, hosts) the TCP store and creates the process group.
/// Throws UserError naming the master address on a time-out. With `shared_store`, the ranks meet
/// there instead: ranks that are threads of one process (Note [Ranks as threads]).
Communicator connect(const WorkerIdentity& env, const DistConfig& config,
                     c10::intrusive_ptr<c10d::Store> shared_store = {});

}  // namespace ddp
