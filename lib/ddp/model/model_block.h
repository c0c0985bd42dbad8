#pragma once
// A model's structure, as the passes see it (Note [Blocks]): its forward as an ordered list of
// blocks, and the runner a pass installs to wrap them.

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ddp {

// Note [Blocks]: a model declares its forward once, as blocks in order: the first takes the model's
// input, each the previous one's output, the last gives the model's output. That is all a model says
// about parallelism. The passes work from it, from outside: pipeline stages cut between blocks, and
// dist.shard parameters gathers each block's parameters before it runs and frees them after (a
// parameter that two blocks use, as a tied embedding, stays with the root, gathered throughout).
// LibTorch's C++ modules have no forward hooks, so a pass that must act around each block installs
// a BlockRunner; without one the model runs its blocks one after another.

/// One piece of a model's forward.
struct ModelBlock {
  std::string name;                       ///< "transformer.h.3": what dist.pipeline_split names
  std::vector<torch::Tensor> parameters;  ///< those it uses (a tied weight is in two blocks)
  std::vector<torch::Tensor> buffers;     ///< those it keeps (BatchNorm statistics, masks)
  std::function<torch::Tensor(torch::Tensor)> forward;
};

/// Runs a model's blocks for a pass that acts around each.
class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  /// `blocks` on input `x`: the model's (or a pipeline stage's) blocks, the same list each call.
  virtual torch::Tensor run(const std::vector<ModelBlock>& blocks, torch::Tensor x) = 0;
};

/// The blocks one after another, as a model runs them when no pass wraps them.
inline torch::Tensor run_in_order(const std::vector<ModelBlock>& blocks, torch::Tensor x) {
  for (const auto& block : blocks) x = block.forward(std::move(x));
  return x;
}

// Note [Embedding tables]: a model that looks rows up in tables by id (DLRM's categorical features,
// one id per sample and feature) declares the tables, whole, and looks them up through one call; a
// pass may then keep the tables elsewhere (Note [Sharded tables]) and install a TableLookup, and the
// model's forward does not change.

/// One of a model's embedding tables, as a pass that keeps its rows elsewhere needs it.
struct EmbeddingTable {
  torch::Tensor weight;  ///< the model's parameter: whole, or [0, dim] where built apart (ModelContext::defer_tables)
  int64_t rows = 0;
  int64_t dim = 0;
  /// Rows [first, first + count) as the model initialises them, on the CPU: the same on every rank
  /// and whichever rows are asked for, so that a rank can make its own alone.
  std::function<torch::Tensor(int64_t first, int64_t count)> initial_rows;
};

/// Looks up rows of a model's tables for a pass that keeps them.
class TableLookup {
 public:
  virtual ~TableLookup() = default;
  /// `ids` int64 [B, F], column f indexing table f (each id within its table) → rows [B, F, dim],
  /// differentiable with respect to the rows.
  virtual torch::Tensor look_up(const torch::Tensor& ids) = 0;
};

/// The rows of `tables` (each whole) that `ids` [B, F] names, [B, F, dim]: the lookup without a pass.
inline torch::Tensor look_up_in(const std::vector<EmbeddingTable>& tables, const torch::Tensor& ids) {
  std::vector<torch::Tensor> rows;
  for (std::size_t f = 0; f < tables.size(); ++f)
    rows.push_back(at::embedding(tables[f].weight, ids.select(1, static_cast<int64_t>(f))));
  return torch::stack(rows, 1);
}

}  // namespace ddp
