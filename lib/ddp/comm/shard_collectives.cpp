#include "ddp/comm/shard_collectives.h"

#include "ddp/comm/shm_allreduce.h"

namespace ddp {
namespace {

// The communicator's shared-memory engine, when it joins exactly the communicator's ranks: a
// group of the world's is one node's ranks when it is as large as the node (ranks are numbered
// node by node, and groups of the innermost mesh dimension are neighbouring ranks).
SharedMemoryAllReduce* shared_memory_for(const Communicator& comm, const torch::Tensor& a, const torch::Tensor& b) {
  if (!comm.shared_memory || comm.shared_memory->size() != comm.world_size) return nullptr;
  return SharedMemoryAllReduce::supports(a) && SharedMemoryAllReduce::supports(b) ? comm.shared_memory.get() : nullptr;
}

}  // namespace

void ShardWork::wait() {
  if (!work_) return;
  comm_->tracker->wait(work_, seq_);
  work_.reset();
  if (then_) std::exchange(then_, {})();
}

ShardWork reduce_scatter(const Communicator& comm, torch::Tensor full, torch::Tensor shard, double divisor) {
  TORCH_CHECK(full.numel() == shard.numel() * comm.world_size, "reduce_scatter: full must hold world_size shards");
  const int64_t seq = comm.tracker->begin("gradient reduce_scatter");
  if (auto* shm = shared_memory_for(comm, full, shard))
    return {&comm, shm->run_async([shm, full, shard, divisor] {
              shm->reduce_scatter(full, shard, static_cast<float>(divisor));
            }), seq};
  torch::NoGradGuard no_grad;
  full.div_(divisor);
  if (comm.backend == "nccl") {
    return {&comm, comm.group->_reduce_scatter_base(shard, full), seq};
  }
  // Gloo: the whole sum, of which this rank keeps its part.
  std::vector<torch::Tensor> tensors{full};
  auto work = comm.group->allreduce(tensors);
  return {&comm, work, seq, [full, shard, rank = comm.rank] {
            torch::NoGradGuard no_grad;
            shard.copy_(full.narrow(0, rank * shard.numel(), shard.numel()));
          }};
}

ShardWork all_gather(const Communicator& comm, torch::Tensor shard, torch::Tensor full) {
  TORCH_CHECK(full.numel() == shard.numel() * comm.world_size, "all_gather: full must hold world_size shards");
  const int64_t seq = comm.tracker->begin("parameter all_gather");
  if (auto* shm = shared_memory_for(comm, full, shard))
    return {&comm, shm->run_async([shm, full, shard] { shm->all_gather(shard, full); }), seq};
  if (comm.backend == "nccl") {
    return {&comm, comm.group->_allgather_base(full, shard), seq};
  }
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int q = 0; q < comm.world_size; ++q) outputs[0].push_back(full.narrow(0, q * shard.numel(), shard.numel()));
  std::vector<torch::Tensor> inputs{shard};  // Gloo gathers into a buffer of its own, then copies out
  return {&comm, comm.group->allgather(outputs, inputs), seq};
}

}  // namespace ddp
