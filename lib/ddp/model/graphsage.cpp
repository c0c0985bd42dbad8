#include "ddp/model/graphsage.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/normalization.h>

namespace ddp {

namespace F = torch::nn::functional;

SageConvImpl::SageConvImpl(int64_t in, int64_t out, std::string aggregation, bool normalize)
    : aggregation_(std::move(aggregation)), normalize_(normalize) {
  lin_l = register_module("lin_l", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true)));
  lin_r = register_module("lin_r", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
}

torch::Tensor SageConvImpl::forward(const torch::Tensor& x, const BlockEdges& block) {
  auto messages = x.index_select(0, block.src);
  auto aggregated = torch::zeros({block.num_dst, x.size(1)}, x.options());
  if (aggregation_ == "max") {
    // A node without neighbours gets zeros, as PyG's max aggregation gives.
    auto index = block.dst.unsqueeze(1).expand_as(messages);
    aggregated = aggregated.scatter_reduce(0, index, messages, "amax", /*include_self=*/false);
  } else {
    aggregated.index_add_(0, block.dst, messages);
    if (aggregation_ == "mean") {
      auto counts = torch::zeros({block.num_dst}, x.options()).index_add_(0, block.dst, torch::ones_like(block.dst, x.options()));
      aggregated = aggregated / counts.clamp_min(1).unsqueeze(1);
    }
  }
  auto out = lin_l(aggregated) + lin_r(x.narrow(0, 0, block.num_dst));
  if (normalize_) out = F::normalize(out, F::NormalizeFuncOptions().p(2).dim(-1));
  return out;
}

GraphSageImpl::GraphSageImpl(const GraphSageOptions& options) : dropout_(options.dropout) {
  convs_ = register_module("convs", torch::nn::ModuleList());
  std::vector<int64_t> widths{options.in};
  widths.insert(widths.end(), options.hidden.begin(), options.hidden.end());
  widths.push_back(options.out);
  for (std::size_t i = 0; i + 1 < widths.size(); ++i)
    convs_->push_back(SageConv(widths[i], widths[i + 1], options.aggregation, options.normalize));
}

torch::Tensor GraphSageImpl::forward(torch::Tensor x, const std::vector<BlockEdges>& blocks) {
  TORCH_CHECK(static_cast<int64_t>(blocks.size()) == layers(), "GraphSAGE: ", layers(), " layers but ", blocks.size(),
              " blocks (sampler.fanouts needs one fanout per layer)");
  for (int64_t i = 0; i < layers(); ++i) {
    x = convs_[static_cast<std::size_t>(i)]->as<SageConv>()->forward(x, blocks[static_cast<std::size_t>(i)]);
    if (i + 1 < layers()) {
      x = torch::relu(x);
      x = F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(is_training()));
    }
  }
  return x;
}

}  // namespace ddp
