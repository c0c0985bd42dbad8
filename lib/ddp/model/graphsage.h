#pragma once
// GraphSAGE (Hamilton et al.) as PyG's `GraphSAGE` computes it on DGL-style blocks: each layer
// out = lin_l(aggregate_{j in N(i)} x_j) + lin_r(x_i), ReLU and dropout between layers. The
// parameter names are PyG's (convs.0.lin_l.weight, ...), so model.pt loads strictly into it.

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace ddp {

/// One layer's edges, local ids: messages flow from src (an input node) to dst (an output node,
/// which is also input node dst: outputs are a prefix of the inputs).
struct BlockEdges {
  torch::Tensor src, dst;  ///< int64 [E]
  int64_t num_dst = 0;
};

/// Each of `num_dst` nodes' messages (rows of `messages`, the node in `dst`) reduced by `aggregation`
/// (mean | max | sum); a node without messages gets zeros, as in PyG.
torch::Tensor aggregate_messages(const torch::Tensor& messages, const torch::Tensor& dst, int64_t num_dst,
                                 const std::string& aggregation);

/// PyG's SAGEConv: lin_l with a bias on the aggregated neighbours, lin_r without one on the node itself.
class SageConvImpl : public torch::nn::Module {
 public:
  SageConvImpl(int64_t in, int64_t out, std::string aggregation, bool normalize);
  /// `x`: the block's input nodes [num_src, in]; returns its output nodes [num_dst, out].
  torch::Tensor forward(const torch::Tensor& x, const BlockEdges& block);
  /// The layer given its output nodes' aggregated neighbours and own features, both [num_dst, in].
  torch::Tensor combine(const torch::Tensor& aggregated, const torch::Tensor& self);
  /// lin_l without its bias: mean and sum commute with it, so a layer may project before it aggregates.
  torch::Tensor project_neighbours(const torch::Tensor& x) { return torch::matmul(x, lin_l->weight.t()); }
  /// The layer from neighbours already projected and aggregated (project_neighbours, then mean or sum).
  torch::Tensor combine_projected(const torch::Tensor& projected, const torch::Tensor& self);
  const std::string& aggregation() const { return aggregation_; }

 private:
  torch::nn::Linear lin_l{nullptr}, lin_r{nullptr};
  std::string aggregation_;
  bool normalize_;
};
TORCH_MODULE(SageConv);

/// Options of the whole network.
struct GraphSageOptions {
  int64_t in = 0, out = 0;
  std::vector<int64_t> hidden;     ///< widths between the layers: layers = hidden.size() + 1
  std::string aggregation = "mean";  ///< mean | max | sum
  bool normalize = false;          ///< L2-normalise each layer's output (SAGEConv's normalize)
  double dropout = 0;
};

class GraphSageImpl : public torch::nn::Module {
 public:
  explicit GraphSageImpl(const GraphSageOptions& options);
  /// Logits of the last block's output nodes, from the first block's input features.
  torch::Tensor forward(torch::Tensor x, const std::vector<BlockEdges>& blocks);
  /// As forward, with the first layer's aggregation done already (by the data pipeline, where the
  /// features are): `self` and `aggregated` [num_dst of the first block, in]; `blocks` the later layers'.
  torch::Tensor forward_aggregated(const torch::Tensor& self, const torch::Tensor& aggregated,
                                   const std::vector<BlockEdges>& blocks);
  /// Layer `i`'s output after its activation (and dropout), as forward applies it between layers.
  torch::Tensor activate(torch::Tensor x, int64_t i);
  SageConvImpl& conv(int64_t i) { return *convs_[static_cast<std::size_t>(i)]->as<SageConv>(); }
  int64_t layers() const { return static_cast<int64_t>(convs_->size()); }

 private:
  torch::nn::ModuleList convs_;
  double dropout_;
};
TORCH_MODULE(GraphSage);

}  // namespace ddp
