#include "ddp/parallel/sharded_blocks.h"

#include <map>
#include <set>
#include <stdexcept>

#include "ddp/parallel/sharded_data_parallel.h"

namespace ddp {

ShardedBlocks::ShardedBlocks(const std::vector<ModelBlock>& blocks, const std::vector<torch::Tensor>& root) {
  std::map<const c10::TensorImpl*, int> uses;
  for (const auto& block : blocks)
    for (const auto& p : block.parameters) ++uses[p.unsafeGetTensorImpl()];
  std::set<const c10::TensorImpl*> rooted;
  for (const auto& t : root) rooted.insert(t.unsafeGetTensorImpl());
  unit_of_block_.assign(blocks.size(), -1);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    std::vector<torch::Tensor> unit;
    for (const auto& p : blocks[i].parameters)
      if (!rooted.count(p.unsafeGetTensorImpl()) && uses[p.unsafeGetTensorImpl()] == 1) unit.push_back(p);
    if (unit.empty()) continue;
    unit_of_block_[i] = static_cast<int>(units_.size());
    units_.push_back(std::move(unit));
  }
}

torch::Tensor ShardedBlocks::run(const std::vector<ModelBlock>& blocks, torch::Tensor x) {
  if (blocks.size() != unit_of_block_.size())
    throw std::logic_error("ShardedBlocks::run: " + std::to_string(blocks.size()) + " blocks, built for " +
                           std::to_string(unit_of_block_.size()));
  if (!engine_) return run_in_order(blocks, std::move(x));
  engine_->before_root();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const int unit = unit_of_block_[i];
    if (unit < 0) {
      x = blocks[i].forward(std::move(x));
    } else {
      engine_->before_unit(static_cast<std::size_t>(unit));
      x = engine_->after_unit(static_cast<std::size_t>(unit), blocks[i].forward(std::move(x)));
    }
  }
  return x;
}

}  // namespace ddp
