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

/// PyG's SAGEConv: lin_l with a bias on the aggregated neighbours, lin_r without one on the node itself.
class SageConvImpl : public torch::nn::Module {
 public:
  SageConvImpl(int64_t in, int64_t out, std::string aggregation, bool normalize);
  /// `x`: the block's input nodes [num_src, in]; returns its output nodes [num_dst, out].
  torch::Tensor forward(const torch::Tensor& x, const BlockEdges& block);

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
  int64_t layers() const { return static_cast<int64_t>(convs_->size()); }

 private:
  torch::nn::ModuleList convs_;
  double dropout_;
};
TORCH_MODULE(GraphSage);

}  // namespace ddp
