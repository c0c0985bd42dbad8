#pragma once
// How the model is spread over the world: the device mesh, this rank's process group along each of
// its dimensions, and what follows from them for the loop: which parameters this rank trains, how
// their gradients are synchronised, what a checkpoint must gather. A parallel strategy (sharding,
// pipeline stages) plugs in here; the loop's control flow does not change.

#include <torch/torch.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/comm/dist_config.h"
#include "ddp/comm/gradient_sync.h"
#include "ddp/comm/process_group.h"
#include "ddp/common/value_slots.h"
#include "ddp/model/deferred_init.h"
#include "ddp/parallel/device_mesh.h"
#include "ddp/parallel/mesh_config.h"
#include "ddp/parallel/optimizer_shards.h"
#include "ddp/parallel/placements.h"
#include "ddp/parallel/sharded_data_parallel.h"
#include "ddp/parallel/stage_parameters.h"
#include "ddp/parallel/tensor_shards.h"
#include "ddp/parallel/training_buffers.h"

namespace ddp {

/// The parallel layout of one run, as seen from one rank.
class ParallelPlan {
 public:
  /// The mesh `mesh` describes over `world`, with this rank's group along each dimension: one as
  /// large as the world is the world's own group (its shared-memory path included), any other a
  /// process group of its own over the world's store. Every rank must build it. Throws ConfigError
  /// for sizes that do not multiply to the world size.
  /// `local_world_size`: ranks per node (0: unknown), which sharding shards over by default.
  ParallelPlan(Communicator world, const MeshConfig& mesh, const DistConfig& dist, int local_world_size = 0);

  const DeviceMesh& mesh() const { return mesh_; }
  /// Every rank.
  const Communicator& world() const { return world_; }
  /// This rank's group along `dim`.
  const Communicator& group(MeshDim dim) const { return groups_[static_cast<std::size_t>(dim)]; }
  /// The ranks that hold this rank's layers, which split the samples and average their gradients:
  /// the world, or with pipeline stages or tensor groups the replicas (and shards) of this rank's
  /// stage and tensor slice.
  const Communicator& data_parallel() const { return data_parallel_ ? *data_parallel_ : world_; }
  /// Pipeline stages (1: none), and this rank's.
  int stages() const { return mesh_.size(MeshDim::kPipeline); }
  int stage() const { return group(MeshDim::kPipeline).rank; }
  /// Whether ranks keep different parts of the parameters or optimizer state (any dist.shard, or
  /// pipeline stages), so that checkpoint.format auto writes a shard per writer, not one file.
  bool splits_state() const { return shard_ != "none" || stages() > 1 || group(MeshDim::kTensor).world_size > 1; }

  /// The parameters of `model` this rank trains, each tensor once (LibTorch lists a tensor
  /// registered under two names, as tied weights are, twice), after making the replicas equal:
  /// rank 0's parameters and buffers everywhere. Fails on every rank unless every rank built the
  /// same architecture. `apart`: parameters a pass keeps elsewhere (sharded tables, which every rank
  /// built alike from the seed): neither made equal nor listed.
  std::vector<torch::Tensor> prepare_model(torch::nn::Module& model, const std::vector<torch::Tensor>& apart = {});
  /// Pipeline stages, after prepare_model: `used[s]` are the parameters stage s's layers use; this
  /// rank keeps its stage's and frees the rest (Note [Stage parameters]). Every rank calls it.
  void split_stages(const std::vector<torch::Tensor>& parameters, const std::vector<std::vector<torch::Tensor>>& used,
                    const std::vector<std::vector<torch::Tensor>>& buffers);
  /// Pipeline stages: this rank's part (null without them).
  const StageParameters* stage_parameters() const { return stage_.get(); }
  /// Tensor parallelism, after prepare_model: `model`'s layers that `plan` names split over the
  /// tensor group (Note [Tensor parallelism]); `parameters` from prepare_model. Every rank calls it.
  void split_tensors(torch::nn::Module& model, const std::vector<TensorPlanEntry>& plan,
                     const std::vector<torch::Tensor>& parameters, SequenceParallel sequence = {},
                     DeferredInit* deferred = nullptr);
  /// Tensor parallelism: the split layers (null without it).
  const TensorShards* tensor_shards() const { return tensor_.get(); }
  /// After the gradient sync: what else the gradients need before clipping (tied weights summed
  /// over the stages that share them; under sequence parallelism the replicated parameters' gradients
  /// of each rank's part of the sequence summed over the tensor group), and `side_values` summed
  /// over the world where the sync only
  /// carried them over the stage's replicas.
  void finish_gradients(ValueSlots& side_values) const;

  /// What averages the gradients of `parameters` (from prepare_model) each step, carrying
  /// `side_values` (which must outlive it): the bucketed all-reduce over the data replicas, or with
  /// dist.shard gradients or parameters the sharded engine, which the plan keeps using while the
  /// returned sync lives. `units`: with dist.shard parameters, the model's shard units' parameters
  /// in forward order; a tensor in none of them, or in several, goes to the root unit. `deferred`
  /// holds parameters built without values (Note [Deferred initialisation]): the sharded engine
  /// takes them unit by unit, each rank its share alone under stage 3, the all-reduce all first.
  std::unique_ptr<GradientSync> make_gradient_sync(std::vector<torch::Tensor> parameters, ValueSlots* side_values,
                                                   const std::vector<std::vector<torch::Tensor>>& units = {},
                                                   DeferredInit* deferred = nullptr);

  /// The tensors this rank's optimizer steps, of `parameters` (from prepare_model): all of them;
  /// with dist.shard optimizer its share of them (Note [Optimizer shards]); with gradients or
  /// parameters its pieces of them (Note [Flat shards]). After make_gradient_sync.
  std::vector<torch::Tensor> optimizer_parameters(const std::vector<torch::Tensor>& parameters);
  /// For optim.decay_params: the dimension count of each optimizer_parameters() tensor's parameter,
  /// where it is not the tensor's own (sharded pieces); empty otherwise (make_optimizer's default).
  std::vector<int64_t> optimizer_parameter_dims() const;
  /// Clips the gradients (after the sync) to a global norm of `max_norm`, over every piece on every rank.
  void clip_grad_norm(double max_norm) const;
  /// After the optimizer stepped: with sharding, the updated parameters where the layout wants them.
  void after_optimizer_step() const;

  /// Where the parameters live on this rank (Note [Placements]). After optimizer_parameters().
  const Placements& placements() const { return placements_; }
  /// What this rank's part of a sharded checkpoint holds: the runs of the parameters whose
  /// optimizer state it keeps and whose copy counts; without sharding every parameter whole. After
  /// optimizer_parameters(). Restoring writes through them; after_optimizer_step() then puts the
  /// values where the layout wants them. With `restored_only`, first those that this rank restores
  /// but another writes (replicated over a tensor group: its rank 0), that many.
  std::vector<OwnedRange> owned_ranges(std::size_t* restored_only = nullptr) const;
  /// Whether this rank writes its shard of a sharded checkpoint: one replica of each shard does.
  bool writes_shard() const { return group(MeshDim::kDataReplicate).rank == 0; }

  /// dist.shard parameters: the engine the model's unit hooks call; null otherwise.
  ShardedDataParallel* parameter_shards() const { return shard_ == "parameters" ? sharded_ : nullptr; }
  /// Every parameter whole in the model (dist.shard parameters gathers them) until release_parameters().
  void gather_parameters() const;
  /// For model.pt: gather_parameters() on its writer; the other ranks take part in the gathers
  /// holding one unit at a time, where neither stages nor tensor parallelism need the whole model
  /// on every rank.
  void gather_parameters_for_writer() const;
  /// Frees what gather_parameters() or an evaluation gathered (dist.shard parameters).
  void release_parameters() const;
  /// Every parameter of the layers this rank runs whole (dist.shard parameters gathers them; a
  /// pipeline stage's own), for an evaluation, until release_parameters(); nothing where the
  /// forward gathers block by block (forward_gathers()).
  void gather_local_parameters() const;
  /// Whether each forward gathers its blocks' parameters over the shard group (dist.shard
  /// parameters, without stages): an evaluation then runs every rank's forwards in lockstep instead
  /// of holding the model whole.
  bool forward_gathers() const { return parameter_shards() != nullptr && !stage_; }
  /// After a sharded checkpoint was restored into the owned ranges and `optimizer`: what the ranges
  /// left out follows (pipeline stages: a tied weight and its state, from its first stage).
  void after_restore(torch::optim::Optimizer& optimizer) const;
  /// Each of `parameters`' (from prepare_model) whole shape, wherever its values are.
  std::vector<std::vector<int64_t>> whole_shapes(const std::vector<torch::Tensor>& parameters) const;
  /// Bytes of parameters and of gradients this rank holds now (its shards where sharded).
  int64_t parameter_bytes(const std::vector<torch::Tensor>& parameters) const;
  int64_t gradient_bytes(const std::vector<torch::Tensor>& parameters) const;
  /// The largest unit's whole parameters, which dist.shard parameters gathers at a time; 0 otherwise.
  int64_t largest_unit_bytes() const { return parameter_shards() ? sharded_->largest_unit_bytes() : 0; }

  /// The collectives this rank has begun so far on each of its process groups, named by the mesh
  /// dimensions they are ("world", "tensor", "world=tensor" where one group is both, ...).
  std::vector<std::pair<std::string, int64_t>> collectives_started() const;

  /// Before evaluation: rank 0's buffers (BatchNorm statistics) on every replica (Note [Lazy buffer broadcast]).
  void share_buffers();
  /// The buffers a training forward reads (Model::buffers_read_in_training), by name, which
  /// before_step shares (Note [Buffers read in training]).
  void watch_buffers_read_in_training(std::vector<std::pair<std::string, torch::Tensor>> buffers) {
    training_buffers_.watch(std::move(buffers));
  }
  /// Before a training step's first forward: rank 0's values of those buffers on every replica.
  void before_step() { training_buffers_.before_step(data_parallel()); }

  /// Whether this rank writes checkpoints and model files: every parameter and optimizer state is
  /// here already (replicas), so rank 0 alone.
  bool writes_checkpoints() const { return world_.rank == 0; }
  /// What the writer needs from the other ranks: each rank's CPU generator state, by rank (ranks
  /// draw different amounts, e.g. dropout on batches of different sizes), and with pipeline stages
  /// each stage's buffers in the writer's model. Every rank takes part; empty except on the writer.
  std::vector<torch::Tensor> gather_checkpoint_state() const;

 private:
  /// On rank 0: a warning for a tensor group, or a default data_shard group, spread over nodes.
  void warn_of_groups_across_nodes(const MeshConfig& config, int node_ranks) const;

  DistConfig dist_;
  std::string shard_;  // dist.shard
  bool shard_overlap_ = false;  // dist.shard_overlap
  Communicator world_;
  DeviceMesh mesh_;
  std::array<Communicator, kMeshDims.size()> groups_;
  std::optional<Communicator> data_parallel_;  // pipeline stages or tensor groups: the ranks of this stage and slice
  std::unique_ptr<StageParameters> stage_;
  std::unique_ptr<TensorShards> tensor_;

  void place(const std::vector<torch::Tensor>& held);

  std::vector<torch::Tensor> buffers_;  // from prepare_model, each once
  mutable TrainingBuffers training_buffers_;  // of buffers_, those a training forward reads (told of every share)
  Placements placements_;
  bool side_values_after_sync_ = false;  // pipeline stages: the sync carries no side values
  std::unique_ptr<OptimizerShards> shards_;  // dist.shard: optimizer
  ShardedDataParallel* sharded_ = nullptr;   // dist.shard: gradients, parameters; the gradient sync
};

}  // namespace ddp
