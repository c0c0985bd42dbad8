#pragma once
// Tensor parallelism applied to a model from outside (Note [Tensor parallelism]): the layers a plan
// names split between the ranks of a tensor group, each keeping its slice of their parameters.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ddp/comm/process_group.h"
#include "ddp/model/deferred_init.h"
#include "ddp/parallel/owned_range.h"
#include "ddp/parallel/placements.h"
#include "ddp/parallel/tensor_box.h"
#include "ddp/parallel/tensor_plan.h"

namespace ddp {

/// Sequence parallelism over a tensor group (Note [Tensor parallelism]).
struct SequenceParallel {
  bool on = false;
  /// The parameters used before the activations are split along the sequence (the embedding
  /// block's): their gradients are whole on every rank. Every other replicated parameter's gradient
  /// is its rank's part of the sequence's, summed over the group after the sync.
  std::vector<torch::Tensor> before_split;
};

/// The model's layers split over a tensor group, in place.
class TensorShards {
 public:
  /// Slices the parameters of `model`'s layers that `plan` names (routed layers, Note [Routed
  /// layers]) to this rank's part of `group` and routes them through Megatron's regions (Note
  /// [Tensor regions]). `parameters`: the plan's list (ParallelPlan::prepare_model), whole, but for
  /// those another pipeline stage holds, freed here (no elements), which stay so. ConfigError
  /// naming the path where an entry matches nothing, or a layer that cannot take its style.
  /// `deferred` holds parameters built without values, of which each rank takes its slices alone
  /// (Note [Deferred initialisation]); null: all have them.
  TensorShards(torch::nn::Module& model, const std::vector<TensorPlanEntry>& plan,
               const std::vector<torch::Tensor>& parameters, const Communicator& group, SequenceParallel sequence = {},
               DeferredInit* deferred = nullptr);
  TensorShards(const TensorShards&) = delete;
  TensorShards& operator=(const TensorShards&) = delete;

  const Communicator& group() const { return group_; }
  /// Whether the model's output is this rank's slice of the vocabulary, starting at output_first().
  bool splits_output() const { return output_first_ >= 0; }
  int64_t output_first() const { return output_first_; }
  /// Parameter i's whole shape.
  const std::vector<int64_t>& whole_shape(std::size_t i) const { return wholes_[i]; }
  /// The boxes of whole parameter i that this rank holds, in its slice's row-major order; empty: it
  /// holds all of it (replicated over the group).
  const std::vector<TensorBox>& boxes(std::size_t i) const { return boxes_[i]; }
  /// `range` (a run of parameter `range.parameter`'s slice, as a sharding engine cuts it, or all of
  /// it) as the boxes of the whole parameter it holds; unchanged where the parameter is not split.
  OwnedRange in_whole(OwnedRange range) const;
  /// Sequence parallelism: `x` [B, S, ...], the same on every rank, to this rank's part of the
  /// sequence, where the model's activations enter the sequence region (after its first block).
  torch::Tensor split_sequence(const torch::Tensor& x) const;
  /// Sequence parallelism, after the gradient sync: each replicated parameter's gradient that
  /// covers this rank's part of the sequence summed over the group, of the pieces `placements` holds.
  void sum_sequence_gradients(const Placements& placements) const;
  /// Every split parameter whole in the model (for model.pt) until release(). Every rank of the group.
  void materialize();
  void release();
  /// "dist.tensor 2: 5 Linear layers split colwise and 4 rowwise, 1 Embedding by vocabulary; ...; this
  /// rank holds 0.05 MiB of their 0.10 MiB of parameters (1/2)".
  std::string describe() const;

 private:
  Communicator group_;
  std::vector<torch::Tensor> parameters_;
  std::vector<std::vector<int64_t>> wholes_, slice_shapes_;
  std::vector<std::vector<TensorBox>> boxes_;
  std::vector<torch::Tensor> kept_;  // while materialized: each split parameter's slice
  int64_t output_first_ = -1;
  bool sequence_parallel_ = false;
  std::vector<bool> sequence_partial_;  // by parameter: replicated, its gradient this rank's part of the sequence's
  mutable at::Generator region_random_;  // the sharded regions' dropout (Note [Tensor parallelism])
  void open_region() const;             // from now on dropout draws from region_random_, reseeded
  /// Note [Checking a tensor plan]: `styles`, the plan's style of each layer it split ('c' colwise,
  /// 'o' the output colwise, 'r' rowwise, 'e' an embedding rowwise), leaves no layer computing on a slice as if whole.
  void check_plan_order(torch::nn::Module& model, const std::map<const torch::nn::Module*, char>& styles,
                        const std::map<const c10::TensorImpl*, std::size_t>& index) const;
  int colwise_ = 0, rowwise_ = 0, embeddings_ = 0;
};

}  // namespace ddp
