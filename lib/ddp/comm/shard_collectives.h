#pragma once
// The two collectives of sharded data parallelism, over whatever the communicator has: shared
// memory within a node, NCCL's native ones on CUDA, and on Gloo (which has no reduce-scatter in
// LibTorch 1.13) an all-reduce that keeps one part, the honest fallback: it moves an all-reduce's bytes.

#include <torch/torch.h>

#include <functional>

#include "ddp/comm/process_group.h"

namespace ddp {

/// A collective under way; wait() finishes it (and what must follow it on this rank).
class ShardWork {
 public:
  ShardWork() = default;
  ShardWork(const Communicator* comm, c10::intrusive_ptr<c10d::Work> work, int64_t seq, std::function<void()> then = {})
      : comm_(comm), work_(std::move(work)), seq_(seq), then_(std::move(then)) {}
  /// Waits for it, as the tracker does (a failure names the missing ranks); then runs its follow-up.
  void wait();
  bool pending() const { return work_ != nullptr; }
  /// Whether wait() would return at once (the collective has finished).
  bool completed() const { return !work_ || work_->isCompleted(); }

 private:
  const Communicator* comm_ = nullptr;
  c10::intrusive_ptr<c10d::Work> work_;
  int64_t seq_ = 0;
  std::function<void()> then_;
};

/// `shard` (S elements) becomes part `comm.rank` of the sum over `comm` of `full` (world_size × S),
/// each rank's values divided by `divisor` first. `full` may be changed. Both must stay alive and
/// untouched until the work is waited for.
ShardWork reduce_scatter(const Communicator& comm, torch::Tensor full, torch::Tensor shard, double divisor);

/// `full` (world_size × S) becomes every rank's `shard` (S), in rank order; `shard` may be a part of `full`.
ShardWork all_gather(const Communicator& comm, torch::Tensor shard, torch::Tensor full);

}  // namespace ddp
