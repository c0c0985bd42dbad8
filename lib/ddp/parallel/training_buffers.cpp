#include "ddp/parallel/training_buffers.h"

#include <spdlog/spdlog.h>

#include "ddp/comm/collectives.h"

namespace ddp {

void TrainingBuffers::watch(std::vector<std::pair<std::string, torch::Tensor>> buffers) {
  watched_.clear();
  for (auto& [name, tensor] : buffers) watched_.push_back({name, tensor, tensor._version()});
  steps_begun_ = 0;
}

void TrainingBuffers::note_changes() {
  for (auto& buffer : watched_) {
    const int64_t now = buffer.tensor._version();
    if (now != buffer.version) buffer.changed = true;
    buffer.version = now;
  }
}

void TrainingBuffers::shared() {
  for (auto& buffer : watched_) buffer.version = buffer.tensor._version();
}

void TrainingBuffers::before_step(const Communicator& replicas) {
  if (watched_.empty() || replicas.world_size == 1) return;
  note_changes();
  if (++steps_begun_ == 1) {  // equal on every replica as the first step begins: nothing to share
    for (auto& buffer : watched_) buffer.changed = false;
    return;
  }
  if (steps_begun_ == 2) {  // the first step's changes, agreed: the live ones from now on
    auto changed = torch::zeros({static_cast<int64_t>(watched_.size())}, torch::kDouble);
    for (std::size_t i = 0; i < watched_.size(); ++i)
      if (watched_[i].changed) changed[static_cast<int64_t>(i)] = 1;
    changed = all_reduce_sum(replicas, changed);
    for (std::size_t i = 0; i < watched_.size(); ++i) {
      watched_[i].live = changed[static_cast<int64_t>(i)].item<double>() > 0;
      watched_[i].changed = false;
    }
  }
  std::vector<torch::Tensor> live;
  for (auto& buffer : watched_) {
    if (buffer.live) {
      live.push_back(buffer.tensor);
    } else if (buffer.changed && !buffer.said) {
      buffer.said = true;
      spdlog::warn(
          "rank {}: the model's buffer {} changed after the first step, in which it did not: it is taken as "
          "constant, and shared from rank 0 at evaluations only (Note [Buffers read in training])",
          replicas.rank, buffer.name);
    }
  }
  if (!live.empty()) broadcast_coalesced(replicas, live, 0);
  shared();  // the broadcast's own writes are no change
  for (auto& buffer : watched_) buffer.changed = false;
}

}  // namespace ddp
