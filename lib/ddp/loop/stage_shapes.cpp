#include "ddp/loop/stage_shapes.h"

namespace ddp {

std::optional<StageShapes::Shape> StageShapes::known(const std::vector<int64_t>& key) const {
  auto found = known_.find(key);
  if (found == known_.end()) return std::nullopt;
  return found->second;
}

void StageShapes::learn(const std::vector<int64_t>& key, Shape shape) { learnt_.emplace(key, std::move(shape)); }

void StageShapes::step_ends() {
  known_.merge(learnt_);
  learnt_.clear();
}

}  // namespace ddp
