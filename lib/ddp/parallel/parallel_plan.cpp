#include "ddp/parallel/parallel_plan.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "ddp/comm/collectives.h"
#include "ddp/comm/gradient_reducer.h"
#include "ddp/comm/shm_allreduce.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/model/rank_random.h"
#include "ddp/parallel/optimizer_state.h"

namespace ddp {
namespace {

// "name [shape]" per parameter and buffer: what must agree across ranks besides the config.
std::string parameter_signature(const torch::nn::Module& model) {
  std::ostringstream out;
  for (const auto& item : model.named_parameters()) out << item.key() << " " << item.value().sizes() << "\n";
  for (const auto& item : model.named_buffers()) out << item.key() << " " << item.value().sizes() << "\n";
  return out.str();
}

// The group's name in the store: its dimension and the first rank in it, unique per group.
std::string group_name(MeshDim dim, const std::vector<int>& ranks) {
  return std::string(mesh_dim_name(dim)) + "/" + std::to_string(ranks.front());
}

// Stage 2's units: DDP's buckets (Note [Bucket order]), in forward order, the root empty.
std::vector<std::vector<std::size_t>> size_units(const std::vector<torch::Tensor>& parameters, const DistConfig& dist) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::vector<std::vector<std::size_t>> units;
  std::vector<std::size_t> current;
  double bytes = 0, cap = dist.first_bucket_mb;
  for (std::size_t i = parameters.size(); i-- > 0;) {
    const auto& p = parameters[i];
    if (!current.empty() && parameters[current.back()].scalar_type() != p.scalar_type()) {
      units.push_back(std::exchange(current, {}));  // a unit is one flat tensor: one dtype
      bytes = 0;
    }
    current.push_back(i);
    bytes += static_cast<double>(p.numel() * static_cast<int64_t>(p.element_size()));
    if (bytes >= cap * kMiB) {
      units.push_back(std::exchange(current, {}));
      bytes = 0;
      cap = dist.bucket_cap_mb;
    }
  }
  if (!current.empty()) units.push_back(std::move(current));
  units.push_back({});  // the root
  std::reverse(units.begin(), units.end());
  for (auto& unit : units) std::reverse(unit.begin(), unit.end());
  return units;
}

// Stage 3's units: the root (what is in no unit or in several: a tied embedding), then the model's.
std::vector<std::vector<std::size_t>> model_units(const std::vector<torch::Tensor>& parameters,
                                                  const std::vector<std::vector<torch::Tensor>>& model) {
  std::map<const c10::TensorImpl*, std::size_t> index;
  for (std::size_t i = 0; i < parameters.size(); ++i) index[parameters[i].unsafeGetTensorImpl()] = i;
  std::vector<int> count(parameters.size(), 0);
  for (const auto& unit : model) {
    std::set<const c10::TensorImpl*> seen;
    for (const auto& p : unit)
      if (seen.insert(p.unsafeGetTensorImpl()).second) count[index.at(p.unsafeGetTensorImpl())] += 1;
  }
  std::vector<std::vector<std::size_t>> units(1);
  for (std::size_t i = 0; i < parameters.size(); ++i)
    if (count[i] != 1) units[0].push_back(i);
  for (const auto& unit : model) {
    units.emplace_back();
    std::set<const c10::TensorImpl*> seen;
    for (const auto& p : unit) {
      std::size_t i = index.at(p.unsafeGetTensorImpl());
      if (count[i] == 1 && seen.insert(p.unsafeGetTensorImpl()).second) units.back().push_back(i);
    }
  }
  return units;
}

// Note [Sharded stages]
// With pipeline stages, each stage's data-parallel group (its replicas × its shards) shards what
// that stage holds, as a whole model is sharded without stages. A weight tied across stages (the
// GPT's embedding and head) needs its pieces to pair up between the stages that hold it: ZeRO-1
// gives it to rank 0 of each stage's shard group; ZeRO-2 and 3 lay it out alone in the root unit,
// so every stage cuts it into the same shards. Shard k of it at one stage then sums its gradient
// with shard k at the other (the tied group joins ranks at the same replica and shard), counts
// into the clipping norm at the first stage only, and after a sharded restore takes its values and
// state from the first stage, which alone saved them.

// The stage's units with its tied weights (`tied`, indices into its parameters) moved into the
// root, which then holds nothing else; units left empty go, but for the root.
std::vector<std::vector<std::size_t>> tied_in_root(std::vector<std::vector<std::size_t>> units,
                                                   const std::vector<std::size_t>& tied) {
  if (tied.empty()) return units;
  auto is_tied = [&tied](std::size_t i) { return std::find(tied.begin(), tied.end(), i) != tied.end(); };
  for (auto& unit : units) std::erase_if(unit, is_tied);
  if (!units.front().empty())
    throw ConfigError("dist.shard: a pipeline stage with a tied weight holds parameters in none or several of its "
                      "layers, which sharding cannot lay out beside it; use dist.shard: none");
  std::vector<std::vector<std::size_t>> kept{tied};
  for (std::size_t u = 1; u < units.size(); ++u)
    if (!units[u].empty()) kept.push_back(std::move(units[u]));
  return kept;
}

// The ranks of a node, as the mesh's default data_shard reads it: rank 0's, on every rank. Nodes
// with other numbers of ranks (--nproc-per-node 2 on one, 1 on the other) each read their own and
// laid out other meshes, and the ranks then called different collectives (a hang, or Gloo's raw
// abort). Through the store, not a collective: the configs are compared only once there is a plan.
int rank_0_local_world_size(const Communicator& world, int local_world_size) {
  if (world.world_size == 1 || !world.store) return local_world_size;
  const std::string key = "ddp/mesh/local_world_size";
  if (world.rank == 0) {
    const std::string value = std::to_string(local_world_size);
    world.store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return local_world_size;
  }
  const std::vector<uint8_t> value = world.store->get(key);
  return static_cast<int>(parse_int(std::string(value.begin(), value.end())).value_or(0));
}

}  // namespace

// A tensor group talks in every layer, and a default data_shard group is meant to be a node's
// ranks (the docs' advice): either spread over nodes runs at the network's speed, which the info
// line's sizes alone do not show. Ranks are numbered node by node; rank 0's node has `node_ranks`.
void ParallelPlan::warn_of_groups_across_nodes(const MeshConfig& config, int node_ranks) const {
  const int world = world_.world_size;
  if (node_ranks <= 0 || world <= node_ranks) return;  // one node, or unknown
  // A group lies within an aligned block of neighbouring ranks, rank 0's group's span. Where the
  // nodes differ in size (rank 0's does not divide the world), only rank 0's node is known here:
  // the tensor groups may or may not span, and are not warned of; the default data_shard group is
  // then every rank (device_mesh.cpp), which does.
  const bool equal_nodes = world % node_ranks == 0;
  auto spans = [&](MeshDim dim) {
    if (mesh_.size(dim) == 1) return false;
    const auto ranks = mesh_.group_ranks(0, dim);
    const int block = ranks.back() + ranks[1];
    return equal_nodes ? node_ranks % block != 0 : dim == MeshDim::kDataShard;
  };
  const std::string nodes = equal_nodes ? "nodes of " + std::to_string(node_ranks) + " rank(s)"
                                        : "nodes of unequal sizes (rank 0's has " + std::to_string(node_ranks) +
                                              " of " + std::to_string(world) + " ranks)";
  if (spans(MeshDim::kTensor))
    spdlog::warn(
        "dist.tensor {}: tensor groups span {}, so every layer's all-reduces cross the network; a tensor "
        "group belongs within a node: a dist.tensor that divides each node's ranks",
        mesh_.size(MeshDim::kTensor), nodes);
  if (config.data_shard == 0 && shard_ != "none" && spans(MeshDim::kDataShard))
    spdlog::warn(
        "dist.data_shard {} (its default) spans {}: there is no node-sized group to shard within, so "
        "its collectives cross the network; give every node the same --nproc-per-node, or set "
        "dist.data_shard",
        mesh_.size(MeshDim::kDataShard), nodes);
}

ParallelPlan::ParallelPlan(Communicator world, const MeshConfig& mesh, const DistConfig& dist, int local_world_size)
    : dist_(dist),
      shard_(mesh.shard),
      shard_overlap_(mesh.shard_overlap),
      world_(std::move(world)),
      mesh_(DeviceMesh::from_config(mesh, world_.world_size, rank_0_local_world_size(world_, local_world_size))) {
  for (MeshDim dim : kMeshDims) {
    auto& group = groups_[static_cast<std::size_t>(dim)];
    if (mesh_.size(dim) == world_.world_size) {
      group = world_;
      continue;
    }
    auto ranks = mesh_.group_ranks(world_.rank, dim);
    group = sub_communicator(world_, group_name(dim, ranks), ranks);
    // A data-shard or tensor group of neighbouring ranks as many as a node's is that node's ranks
    // (ranks numbered node by node): its collectives can go through shared memory. A tensor group
    // sums with the engine's sum(), which on several nodes adds every node's: there it takes Gloo
    // (the shard collectives stay within the node).
    const bool neighbours = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    const auto& shm = world_.shared_memory;
    if (neighbours && shm && shm->size() == group.world_size &&
        (dim == MeshDim::kDataShard || (dim == MeshDim::kTensor && !shm->spans_nodes())))
      group.shared_memory = shm;
  }
  if (mesh_.size(MeshDim::kPipeline) > 1 || mesh_.size(MeshDim::kTensor) > 1) {
    auto ranks = mesh_.data_parallel_ranks(world_.rank);
    data_parallel_ = sub_communicator(world_, "data_parallel/" + std::to_string(ranks.front()), ranks);
  }
  if (world_.rank == 0) warn_of_groups_across_nodes(mesh, local_world_size);
  // A group of one rank splits nothing: the memory is what dist.shard none would hold, which the
  // info line alone left to be read from the mesh's sizes. (A world of one, a config tried on one
  // rank before many, is said by its world size.)
  if (world_.rank == 0 && shard_ != "none" && mesh_.size(MeshDim::kDataShard) == 1 && world_.world_size > 1)
    spdlog::warn(
        "dist.shard {} does nothing here: each data_shard group of the mesh {} is one rank, so every rank "
        "holds what dist.shard none would; ranks left for dist.data_shard (more ranks, or fewer for the "
        "other dimensions) split it",
        shard_, mesh_.describe());
  else if (world_.rank == 0 && shard_ != "none")
    spdlog::info("dist.shard {}: {} split within each data_shard group of the mesh {}", shard_,
                 shard_ == "optimizer"   ? "the optimizer state is"
                 : shard_ == "gradients" ? "gradients and optimizer state are"
                                         : "parameters, gradients and optimizer state are",
                 mesh_.describe());
}

std::vector<torch::Tensor> ParallelPlan::prepare_model(torch::nn::Module& model, const std::vector<torch::Tensor>& apart) {
  // Shapes first: broadcasting into a different architecture would fail obscurely or hang.
  check_identical_across_ranks(world_, "model parameters", parameter_signature(model));
  std::vector<torch::Tensor> parameters;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& p : apart) seen.insert(p.unsafeGetTensorImpl());
  for (const auto& p : model.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) parameters.push_back(p);
  buffers_.clear();
  for (const auto& b : model.buffers())
    if (seen.insert(b.unsafeGetTensorImpl()).second) buffers_.push_back(b);
  // A parameter built deferred has no storage yet: every rank gives it the same values from the
  // seed, when a pass needs them (Note [Deferred initialisation]).
  std::vector<torch::Tensor> state;
  for (const auto& t : parameters)
    if (has_values(t)) state.push_back(t);
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_coalesced(world_, state, 0);  // before any stage frees what it does not hold
  return parameters;
}

void ParallelPlan::split_stages(const std::vector<torch::Tensor>& parameters,
                                const std::vector<std::vector<torch::Tensor>>& used,
                                const std::vector<std::vector<torch::Tensor>>& buffers) {
  stage_ = std::make_unique<StageParameters>(parameters, used, buffers, world_, mesh_, group(MeshDim::kPipeline));
}

void ParallelPlan::split_tensors(torch::nn::Module& model, const std::vector<TensorPlanEntry>& plan,
                                 const std::vector<torch::Tensor>& parameters, SequenceParallel sequence,
                                 DeferredInit* deferred) {
  tensor_ = std::make_unique<TensorShards>(model, plan, parameters, group(MeshDim::kTensor), std::move(sequence),
                                           deferred);
}

void ParallelPlan::finish_gradients(ValueSlots& side_values) const {
  sum_copied_gradients(placements_);
  if (tensor_) tensor_->sum_sequence_gradients(placements_);
  if (!side_values_after_sync_) return;
  auto sums = all_reduce_sum(world_, torch::tensor(side_values.packed(), torch::kDouble)).contiguous();
  std::copy(sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel(), side_values.packed().begin());
}

void ParallelPlan::after_restore(torch::optim::Optimizer& optimizer) const {
  bool copied = false;
  for (const auto& piece : placements_.held) copied = copied || piece.copies;
  if (!copied) return;
  if (shards_) shards_->share_updated_parameters();  // a copied piece's values from its owner first
  share_copied_pieces(placements_, optimizer);
}

std::vector<torch::Tensor> ParallelPlan::optimizer_parameters(const std::vector<torch::Tensor>& parameters) {
  const std::vector<torch::Tensor>& held = stage_ ? stage_->mine() : parameters;
  if (shard_ == "optimizer")
    shards_ = stage_ ? std::make_unique<OptimizerShards>(held, group(MeshDim::kDataShard), stage_->tied())
                     : std::make_unique<OptimizerShards>(held, group(MeshDim::kDataShard));
  place(held);
  if (sharded_) return sharded_->pieces();
  return shards_ ? shards_->owned() : held;
}

void ParallelPlan::place(const std::vector<torch::Tensor>& held) {
  // Note [Placements]: the passes in their order, each on what the previous left. The stage's
  // parameters, numbered in the plan's list; each whole, or cut into runs by ZeRO-2/3.
  std::vector<OwnedRange> held_ranges;
  if (sharded_) {
    held_ranges = sharded_->owned_ranges();
  } else {
    for (std::size_t i = 0; i < held.size(); ++i) held_ranges.push_back({i, 0, held[i].detach(), held[i], {}});
  }
  std::vector<OwnedRange> kept_ranges = shards_ ? shards_->owned_ranges() : held_ranges;
  auto placed = [this](OwnedRange range) {
    PlacedPiece piece;
    if (stage_) {
      range.parameter = stage_->mine_indices()[range.parameter];
      piece.counted = stage_->counts(range.parameter);
      piece.copies = stage_->copies(range.parameter);
    }
    if (tensor_) {  // a tensor-parallel slice's runs are boxes of the whole parameter
      piece.counted = piece.counted && (!tensor_->boxes(range.parameter).empty() || group(MeshDim::kTensor).rank == 0);
      range = tensor_->in_whole(std::move(range));
    }
    piece.range = std::move(range);
    return piece;
  };
  placements_ = {};
  for (auto& range : held_ranges) placements_.held.push_back(placed(std::move(range)));
  for (auto& range : kept_ranges) placements_.kept.push_back(placed(std::move(range)));
  if (sharded_ && group(MeshDim::kDataShard).world_size > 1) placements_.split.push_back(&group(MeshDim::kDataShard));
  if (stage_) placements_.split.push_back(&group(MeshDim::kPipeline));
  if (tensor_) placements_.split.push_back(&group(MeshDim::kTensor));
}

std::vector<int64_t> ParallelPlan::optimizer_parameter_dims() const {
  return sharded_ ? sharded_->piece_dims() : std::vector<int64_t>{};  // empty: each tensor's own
}

void ParallelPlan::clip_grad_norm(double max_norm) const { ddp::clip_grad_norm(placements_, max_norm); }

void ParallelPlan::after_optimizer_step() const {
  if (shards_) shards_->share_updated_parameters();
  if (sharded_) sharded_->after_optimizer_step();
}

std::vector<OwnedRange> ParallelPlan::owned_ranges(std::size_t* restored_only) const {
  return saved_ranges(placements_, restored_only);
}

void ParallelPlan::gather_parameters() const {
  if (auto* engine = parameter_shards()) engine->gather_parameters();  // the stage's own, whole
  if (tensor_) tensor_->materialize();  // the stage's own whole, then every stage's from its own
  if (stage_) {
    training_buffers_.before_share();  // its broadcast of every stage's buffers is no change
    stage_->materialize();
    training_buffers_.shared();
  }
}

void ParallelPlan::gather_parameters_for_writer() const {
  auto* engine = parameter_shards();
  if (writes_checkpoints() || tensor_ || stage_ || !engine) return gather_parameters();
  engine->take_part_in_gather();
}

void ParallelPlan::gather_local_parameters() const {
  if (forward_gathers()) return;
  if (auto* engine = parameter_shards()) engine->gather_parameters();  // the stage's own, whole
}

void ParallelPlan::release_parameters() const {
  if (tensor_) tensor_->release();
  if (stage_) stage_->release();
  if (auto* engine = parameter_shards()) engine->release_parameters();
}

std::vector<std::vector<int64_t>> ParallelPlan::whole_shapes(const std::vector<torch::Tensor>& parameters) const {
  if (stage_) return stage_->shapes();
  std::vector<std::vector<int64_t>> shapes;
  for (std::size_t i = 0; i < parameters.size(); ++i)
    shapes.push_back(tensor_ ? tensor_->whole_shape(i) : parameters[i].sizes().vec());
  return shapes;
}

int64_t ParallelPlan::parameter_bytes(const std::vector<torch::Tensor>& parameters) const {
  if (sharded_) return sharded_->parameter_bytes();
  if (stage_) return stage_->bytes();
  int64_t bytes = 0;
  for (const auto& p : parameters) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

int64_t ParallelPlan::gradient_bytes(const std::vector<torch::Tensor>& parameters) const {
  if (sharded_) return sharded_->gradient_bytes();
  int64_t bytes = 0;
  for (const auto& p : stage_ ? stage_->mine() : parameters)
    if (p.grad().defined()) bytes += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
  return bytes;
}

std::unique_ptr<GradientSync> ParallelPlan::make_gradient_sync(std::vector<torch::Tensor> parameters,
                                                               ValueSlots* side_values,
                                                               const std::vector<std::vector<torch::Tensor>>& units,
                                                               DeferredInit* deferred) {
  // Pipeline stages: each syncs what it holds; the side values go over the world afterwards
  // (finish_gradients), not with a stage's own replicas' sync.
  if (stage_) {
    parameters = stage_->mine();
    side_values = nullptr;
    side_values_after_sync_ = true;
  }
  if (shard_ != "gradients" && shard_ != "parameters") {
    if (deferred) deferred->materialize(parameters);  // whole on every replica (Note [Deferred initialisation])
    return std::make_unique<GradientReducer>(std::move(parameters), data_parallel(), dist_, side_values);
  }
  ShardedOptions options;
  options.shard_parameters = shard_ == "parameters";
  options.overlap = shard_overlap_;
  options.data_parallel_size = data_parallel().world_size;
  options.deferred = deferred;
  auto unit_indices = options.shard_parameters ? model_units(parameters, units) : size_units(parameters, dist_);
  if (stage_) {
    stage_->check_one_tied_set();
    unit_indices = tied_in_root(std::move(unit_indices), stage_->tied());
  }
  auto engine = std::make_unique<ShardedDataParallel>(parameters, std::move(unit_indices), group(MeshDim::kDataShard),
                                                      group(MeshDim::kDataReplicate), data_parallel(), options,
                                                      side_values);
  sharded_ = engine.get();
  return engine;
}

std::vector<std::pair<std::string, int64_t>> ParallelPlan::collectives_started() const {
  std::vector<std::pair<const CollectiveTracker*, std::string>> named;
  auto add = [&named](const Communicator& group, const std::string& name) {
    if (group.world_size <= 1 || !group.tracker) return;
    for (auto& [tracker, names] : named)
      if (tracker == group.tracker.get()) {
        names += "=" + name;
        return;
      }
    named.emplace_back(group.tracker.get(), name);
  };
  add(world_, "world");
  for (MeshDim dim : kMeshDims) add(group(dim), mesh_dim_name(dim));
  if (data_parallel_) add(*data_parallel_, "data_parallel");
  std::vector<std::pair<std::string, int64_t>> started;
  for (const auto& [tracker, names] : named) started.emplace_back(names, tracker->started());
  return started;
}

void ParallelPlan::share_buffers() {
  // Note [Lazy buffer broadcast]: DDP copies rank 0's buffers (BatchNorm running statistics) to
  // every rank before each forward. In training mode BatchNorm reads none of them, and rank 0's own
  // never depend on the other ranks', so copying them only when they are read (before evaluation;
  // rank 0 writes checkpoints and model.pt from its own) gives exactly DDP's values, without a
  // collective per step. Buffers that a training forward does read: Note [Buffers read in training].
  const Communicator& replicas = data_parallel();
  training_buffers_.before_share();
  if (!buffers_.empty() && replicas.world_size > 1) broadcast_coalesced(replicas, buffers_, 0);
  training_buffers_.shared();
}

std::vector<torch::Tensor> ParallelPlan::gather_checkpoint_state() const {
  if (stage_) {
    training_buffers_.before_share();
    stage_->share_buffers();
    training_buffers_.shared();
  }
  // The rank's own, never a tensor region's that a forward may have left set (Note [Tensor parallelism]).
  torch::Tensor mine = rank_cpu_generator().get_state();
  auto all = torch::zeros({world_.world_size, mine.numel()}, torch::kDouble);
  all[world_.rank].copy_(mine.to(torch::kDouble));
  all = all_reduce_sum(world_, all);
  std::vector<torch::Tensor> rank_rng;
  if (!writes_checkpoints()) return rank_rng;
  for (int r = 0; r < world_.world_size; ++r) rank_rng.push_back(all[r].to(mine.scalar_type()).contiguous());
  return rank_rng;
}

}  // namespace ddp
