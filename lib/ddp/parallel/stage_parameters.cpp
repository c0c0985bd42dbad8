#include "ddp/parallel/stage_parameters.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/fmt/ranges.h>

#include <set>

#include "ddp/comm/collectives.h"
#include "ddp/common/error.h"

namespace ddp {

// Note [Stage parameters]
// Every rank builds the model from the same seed, so the stages start as one model would; each then
// frees the parameters its layers do not use (an empty tensor in their place), keeping about 1/P
// of them. Where the model was built deferred (Note [Deferred initialisation]) those freed never
// get values, and the rest get theirs from the passes after this one. A weight two stages use (the GPT's embedding, tied to its head, in the first
// and last stage) is held by both, as copies (Note [Placements]): each sums the other's gradient
// into its own after the data-parallel sync, so both step the same gradient from the same state
// and stay equal, as one tensor would. The norm for clipping counts it once. Writing model.pt or a whole checkpoint
// briefly materialises every parameter on every rank from the stage that holds it.

namespace {

// The stages' group ranks are their pipeline group's, in stage order.
Communicator make_tied_group(const Communicator& world, const DeviceMesh& mesh, const std::vector<int>& stages) {
  auto pipeline_ranks = mesh.group_ranks(world.rank, MeshDim::kPipeline);
  std::vector<int> ranks;
  for (int s : stages) ranks.push_back(pipeline_ranks[static_cast<std::size_t>(s)]);
  // fmt, not string +=: GCC 12 warns wrongly about the latter inlined here (stringop-overflow).
  return sub_communicator(world, fmt::format("tied/{}", fmt::join(ranks, "/")), ranks);
}

}  // namespace

StageParameters::StageParameters(const std::vector<torch::Tensor>& parameters,
                                 const std::vector<std::vector<torch::Tensor>>& used,
                                 const std::vector<std::vector<torch::Tensor>>& buffers, const Communicator& world,
                                 const DeviceMesh& mesh, const Communicator& pipeline)
    : pipeline_(pipeline) {
  std::set<const c10::TensorImpl*> kept;  // a buffer two stages keep comes from the first
  for (const auto& stage : buffers) {
    buffers_.emplace_back();
    for (const auto& b : stage)
      if (kept.insert(b.unsafeGetTensorImpl()).second) buffers_.back().push_back(b);
  }
  std::map<const c10::TensorImpl*, std::size_t> index;
  for (const auto& p : parameters) {
    index.emplace(p.unsafeGetTensorImpl(), placed_.size());
    placed_.push_back({p, p.sizes().vec(), -1, {}, false});
  }
  for (int s = 0; s < static_cast<int>(used.size()); ++s)
    for (const auto& p : used[static_cast<std::size_t>(s)]) {
      auto found = index.find(p.unsafeGetTensorImpl());
      if (found == index.end()) continue;  // not trained (frozen)
      auto& stages = placed_[found->second].stages;
      if (stages.empty() || stages.back() != s) stages.push_back(s);
    }
  torch::NoGradGuard no_grad;
  for (auto& p : placed_) {
    if (p.stages.empty()) p.stages.push_back(0);  // in no layer: the first stage keeps it
    p.owner = p.stages.front();
    for (int s : p.stages) p.mine = p.mine || s == pipeline_.rank;
    if (p.mine) {
      mine_indices_.push_back(static_cast<std::size_t>(&p - placed_.data()));
      mine_.push_back(p.tensor);
    } else
      p.tensor.set_data(torch::empty({0}, p.tensor.options()));
    if (p.stages.size() > 1 && p.mine && !tied_groups_.count(p.stages))
      tied_groups_.emplace(p.stages, make_tied_group(world, mesh, p.stages));
  }
}

std::vector<std::size_t> StageParameters::tied() const {
  std::vector<std::size_t> tied;
  for (std::size_t k = 0; k < mine_indices_.size(); ++k)
    if (placed_[mine_indices_[k]].stages.size() > 1) tied.push_back(k);
  return tied;
}

void StageParameters::check_one_tied_set() const {
  if (tied_groups_.size() > 1)
    throw ConfigError("dist.shard: this stage's weights are tied with " + std::to_string(tied_groups_.size()) +
                      " different sets of stages, and sharding within stages pairs one; use dist.shard: none or "
                      "another dist.pipeline_split");
}

const Communicator* StageParameters::copies(std::size_t index) const {
  const Placed& p = placed_[index];
  return p.mine && p.stages.size() > 1 ? &tied_groups_.at(p.stages) : nullptr;
}

int64_t StageParameters::bytes() const {
  int64_t bytes = 0;
  for (const auto& p : mine_) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

std::vector<std::vector<int64_t>> StageParameters::shapes() const {
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : placed_) shapes.push_back(p.shape);
  return shapes;
}

void StageParameters::share_buffers() const {
  for (int stage = 0; stage < static_cast<int>(buffers_.size()); ++stage)
    if (!buffers_[stage].empty()) broadcast_coalesced(pipeline_, buffers_[stage], stage);
}

void StageParameters::materialize() const {
  share_buffers();
  torch::NoGradGuard no_grad;
  for (const auto& p : placed_)
    if (!p.mine) p.tensor.set_data(torch::empty(p.shape, p.tensor.options()));
  for (int stage = 0; stage < pipeline_.world_size; ++stage) {
    std::vector<torch::Tensor> from_stage;
    for (const auto& p : placed_)
      if (p.owner == stage) from_stage.push_back(p.tensor);
    if (!from_stage.empty()) broadcast_coalesced(pipeline_, from_stage, stage);
  }
}

void StageParameters::release() const {
  torch::NoGradGuard no_grad;
  for (const auto& p : placed_)
    if (!p.mine) p.tensor.set_data(torch::empty({0}, p.tensor.options()));
}

}  // namespace ddp
