#pragma once
// ZeRO stages 2 and 3 (dist.shard: gradients, parameters), with FSDP's flat parameters: the ranks
// of a data-shard group split each unit's gradients, optimizer state and (stage 3) parameters into
// contiguous shards, and the data-replicate group, when there is one, keeps copies of the shards
// (HSDP). See Note [Flat shards] and Note [Unit hooks] in sharded_data_parallel.cpp.

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "ddp/comm/gradient_sync.h"
#include "ddp/comm/process_group.h"
#include "ddp/comm/shard_collectives.h"
#include "ddp/common/value_slots.h"
#include "ddp/model/deferred_init.h"
#include "ddp/parallel/owned_range.h"
#include "ddp/parallel/unit_memory.h"

namespace torch::autograd {
struct Node;
}

namespace ddp {

/// What is sharded and between which ranks.
struct ShardedOptions {
  bool shard_parameters = false;  ///< stage 3: parameters live sharded between uses (else stage 2)
  /// Stage 3: a backward's gathers and reduce-scatters overlap its compute, at the memory of about
  /// two more units (Note [Gradient memory]).
  bool overlap = false;
  int data_parallel_size = 1;     ///< ranks whose gradients are averaged: the divisor
  /// Parameters built without values (Note [Deferred initialisation]), given theirs unit by unit as
  /// the flat copies are made: under stage 3 each rank takes only its share of a unit's elements;
  /// null: every parameter has its values.
  DeferredInit* deferred = nullptr;
};

/// The gradient sync, optimizer view and (stage 3) parameter gathering of a sharded run.
class ShardedDataParallel final : public GradientSync {
 public:
  /// `units`: indices into `parameters` (each tensor once), every parameter in exactly one unit;
  /// unit 0 is the root (Note [Unit hooks]; may be empty), the others in the model's forward order.
  /// Moves each unit's parameters into its flat tensor, and with stage 3 frees all but the shards.
  /// `shard_group`, `replicate_group`, `world` and `side_values` must outlive it.
  ShardedDataParallel(std::vector<torch::Tensor> parameters, std::vector<std::vector<std::size_t>> units,
                      const Communicator& shard_group, const Communicator& replicate_group,
                      const Communicator& world, ShardedOptions options, ValueSlots* side_values);
  ~ShardedDataParallel() override;
  ShardedDataParallel(const ShardedDataParallel&) = delete;  // the autograd hooks capture `this`
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  void prepare() override;
  /// Reduce-scatters what backward has not, waits for all of it, and leaves in each gradient shard
  /// the average over every data-parallel rank; frees the whole gradients (and stage 3's parameters).
  void finish() override;
  void zero_grad() override;
  const ReducerTiming& timing() const override { return timing_; }

  /// What this rank's optimizer steps: its piece of each parameter that has one, 1-D views of its
  /// parameter shards whose gradients are views of its gradient shards.
  const std::vector<torch::Tensor>& pieces() const { return pieces_; }
  /// The dimension count of each piece's parameter (optim.decay_params).
  std::vector<int64_t> piece_dims() const;
  /// The pieces as runs of their parameters (indices into the constructor's list): sharded checkpoints.
  std::vector<OwnedRange> owned_ranges() const;

  /// After the optimizer stepped the pieces: stage 2 gathers every rank's whole parameters.
  void after_optimizer_step();

  /// Stage 3, from the blocks' runner (Note [Unit hooks]): the root's parameters as forward starts.
  void before_root();
  /// Stage 3: before model unit `unit` (0-based, not counting the root) runs.
  void before_unit(std::size_t unit);
  /// Stage 3: after it ran: frees its parameters, and hooks `output` to gather them again for backward.
  torch::Tensor after_unit(std::size_t unit, torch::Tensor output);

  /// Stage 3: every parameter whole, and kept so by forwards, until release_parameters() (model.pt,
  /// checkpoints, resume, evaluation).
  void gather_parameters();
  /// Stage 3: the collectives of gather_parameters(), in its order, for a rank that keeps what they
  /// gather, each unit freed here once gathered.
  void take_part_in_gather();
  /// Stage 3: frees whatever is gathered.
  void release_parameters();

  /// Bytes of parameters this rank holds now: its shards, and the whole units gathered.
  int64_t parameter_bytes() const;
  /// Bytes of gradients this rank holds now: its shards, and the flat gradients being reduced.
  int64_t gradient_bytes() const;
  /// The largest unit's whole parameters: what stage 3 gathers at a time (twice that with prefetch).
  int64_t largest_unit_bytes() const;

 private:
  struct Unit {
    std::vector<std::size_t> parameters;  // indices into parameters_, in flat order
    std::vector<int64_t> offsets;         // each one's start in the flat tensor
    int64_t shard_numel = 0;              // S: the flat tensor is group size × S, zero-padded
    torch::Tensor full;                   // the whole parameters (stage 3: memory only while gathered)
    torch::Tensor shard;                  // this rank's S, which the optimizer steps (stage 2: a view of full)
    torch::Tensor grad_full;              // the whole gradients, flat, while they are reduced; undefined otherwise
    torch::Tensor grad_shard;             // this rank's S of the averaged gradient
    bool gathered = true;
    ShardWork gathering, reducing;
    std::size_t pending = 0;              // gradients not yet accumulated in this backward
    std::size_t gradients = 0;            // parameters of it that get gradients
  };
  using Clock = std::chrono::steady_clock;

  void on_gradient_ready(std::size_t parameter);  // after accumulation: the parameter's .grad is whole
  void launch_ready(bool all);
  void finish_reduces();  // waits for the launched reduce-scatters and frees their flat gradients
  void reduce(Unit& unit);
  void prefetch(std::size_t unit);
  void gather(std::size_t unit);
  void release(std::size_t unit);
  void release_gradients(Unit& unit);
  void arm_backward(std::size_t unit);

  std::vector<torch::Tensor> parameters_;
  std::vector<Unit> units_;
  std::vector<std::size_t> unit_of_;  // parameter → unit
  const Communicator& shard_group_;
  const Communicator& replicate_group_;
  const Communicator& world_;
  ShardedOptions options_;
  ValueSlots* side_values_;
  std::vector<double> side_sent_;
  std::vector<torch::Tensor> pieces_;
  std::vector<torch::Tensor> piece_grads_;    // piece → its gradient, a view of its unit's gradient shard
  std::vector<std::size_t> piece_parameter_;  // piece → parameter
  std::vector<int64_t> piece_offset_;         // piece → its start in its parameter's flattened values
  std::vector<int64_t> piece_at_;             // piece → its start in its unit's shard
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // kept alive: they hold our hooks
  std::vector<uint8_t> used_;
  std::unique_ptr<UnitMemory> memory_;  // whole units' blocks (Note [Unit memory])
  bool held_ = false;   // between gather_parameters() and release_parameters(): nothing is freed
  bool armed_ = false;
  std::size_t launched_ = 0;  // units reduce-scattered this step, in launch order (the last unit first)
  Clock::time_point first_launch_;
  double backward_wait_ms_ = 0;  // this step's waits for reduce-scatters inside backward (finish_reduces)
  ReducerTiming timing_;
};

}  // namespace ddp
