#include "ddp/parallel/parallel_plan.h"

#include <set>
#include <sstream>

#include "ddp/comm/collectives.h"
#include "ddp/comm/gradient_reducer.h"

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

}  // namespace

ParallelPlan::ParallelPlan(Communicator world, const MeshConfig& mesh, const DistConfig& dist, int local_world_size)
    : dist_(dist),
      shard_(mesh.shard),
      world_(std::move(world)),
      mesh_(DeviceMesh::from_config(mesh, world_.world_size, local_world_size)) {
  for (MeshDim dim : kMeshDims) {
    auto& group = groups_[static_cast<std::size_t>(dim)];
    if (mesh_.size(dim) == world_.world_size) {
      group = world_;
      continue;
    }
    auto ranks = mesh_.group_ranks(world_.rank, dim);
    group = sub_communicator(world_, group_name(dim, ranks), ranks);
  }
}

std::vector<torch::Tensor> ParallelPlan::prepare_model(torch::nn::Module& model) {
  // Shapes first: broadcasting into a different architecture would fail obscurely or hang.
  check_identical_across_ranks(world_, "model parameters", parameter_signature(model));
  std::vector<torch::Tensor> parameters;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& p : model.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) parameters.push_back(p);
  buffers_.clear();
  for (const auto& b : model.buffers())
    if (seen.insert(b.unsafeGetTensorImpl()).second) buffers_.push_back(b);
  std::vector<torch::Tensor> state = parameters;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_coalesced(data_parallel(), state, 0);
  return parameters;
}

std::vector<torch::Tensor> ParallelPlan::optimizer_parameters(const std::vector<torch::Tensor>& parameters) {
  if (shard_ == "none") return parameters;
  shards_ = std::make_unique<OptimizerShards>(parameters, group(MeshDim::kDataShard));
  return shards_->owned();
}

void ParallelPlan::after_optimizer_step() const {
  if (shards_) shards_->share_updated_parameters();
}

void ParallelPlan::gather_optimizer_state(const torch::optim::Optimizer& sharded,
                                          torch::optim::Optimizer& whole) const {
  shards_->gather_state(sharded, whole);
}

void ParallelPlan::keep_optimizer_state(const torch::optim::Optimizer& whole, torch::optim::Optimizer& sharded) const {
  shards_->keep_owned_state(whole, sharded);
}

std::unique_ptr<GradientSync> ParallelPlan::make_gradient_sync(std::vector<torch::Tensor> parameters,
                                                               ValueSlots* side_values) const {
  return std::make_unique<GradientReducer>(std::move(parameters), data_parallel(), dist_, side_values);
}

void ParallelPlan::share_buffers() {
  // Note [Lazy buffer broadcast]: DDP copies rank 0's buffers (BatchNorm running statistics) to
  // every rank before each forward. In training mode nothing reads them, and rank 0's own never
  // depend on the other ranks', so copying them only when they are read (before evaluation; rank 0
  // writes checkpoints and model.pt from its own) gives exactly DDP's values, without a collective per step.
  const Communicator& replicas = data_parallel();
  if (!buffers_.empty() && replicas.world_size > 1) broadcast_coalesced(replicas, buffers_, 0);
}

std::vector<torch::Tensor> ParallelPlan::gather_checkpoint_state() const {
  torch::Tensor mine = at::detail::getDefaultCPUGenerator().get_state();
  auto all = torch::zeros({world_.world_size, mine.numel()}, torch::kDouble);
  all[world_.rank].copy_(mine.to(torch::kDouble));
  all = all_reduce_sum(world_, all);
  std::vector<torch::Tensor> rank_rng;
  if (!writes_checkpoints()) return rank_rng;
  for (int r = 0; r < world_.world_size; ++r) rank_rng.push_back(all[r].to(mine.scalar_type()).contiguous());
  return rank_rng;
}

}  // namespace ddp
