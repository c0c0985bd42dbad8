#include "ddp/model/graphsage.h"

#include "ddp/config/config_schema.h"
#include "ddp/model/byte_mask_dropout.h"
#include "ddp/model/gather_sum.h"
#include "ddp/model/graphsage_config.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/normalization.h>

namespace ddp {

namespace F = torch::nn::functional;

SageConvImpl::SageConvImpl(int64_t in, int64_t out, std::string aggregation, bool normalize)
    : aggregation_(std::move(aggregation)), normalize_(normalize) {
  lin_l = register_module("lin_l", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true)));
  lin_r = register_module("lin_r", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
}

torch::Tensor aggregate_messages(const torch::Tensor& messages, const torch::Tensor& dst, int64_t num_dst,
                                 const std::string& aggregation) {
  auto aggregated = torch::zeros({num_dst, messages.size(1)}, messages.options());
  if (aggregation == "max") {
    auto index = dst.unsqueeze(1).expand_as(messages);
    return aggregated.scatter_reduce(0, index, messages, "amax", /*include_self=*/false);
  }
  aggregated.index_add_(0, dst, messages);
  if (aggregation == "mean") {
    auto counts = torch::zeros({num_dst}, messages.options()).index_add_(0, dst, torch::ones_like(dst, messages.options()));
    aggregated = aggregated / counts.clamp_min(1).unsqueeze(1);
  }
  return aggregated;
}

torch::Tensor SageConvImpl::forward(const torch::Tensor& x, const BlockEdges& block) {
  torch::Tensor aggregated, self;
  if (aggregation_ == "max") {
    aggregated = aggregate_messages(x.index_select(0, block.src), block.dst, block.num_dst, aggregation_);
    self = x.narrow(0, 0, block.num_dst);
  } else {  // the same sums without an [E, F] tensor of messages
    std::tie(aggregated, self) = gather_sum(x, block.src, block.dst, block.num_dst);
    if (aggregation_ == "mean") {
      auto counts = torch::zeros({block.num_dst}, x.options()).index_add_(0, block.dst, torch::ones_like(block.dst, x.options()));
      aggregated = aggregated / counts.clamp_min(1).unsqueeze(1);
    }
  }
  return combine(aggregated, self);
}

torch::Tensor SageConvImpl::combine(const torch::Tensor& aggregated, const torch::Tensor& self) {
  // One buffer for both products (addmm keeps its inputs for backward, not its output): on a
  // Reddit-sized batch each [26k, 256] activation is 27 MB of every rank's memory.
  auto out = torch::addmm(lin_l->bias, aggregated, lin_l->weight.t());
  // Autocast (train.precision: bf16) casts addmm's inputs but not an in-place op's: out is already
  // bfloat16 while the weight stays float32, so mixed types add out of place.
  if (out.scalar_type() == self.scalar_type() && self.scalar_type() == lin_r->weight.scalar_type())
    out.addmm_(self, lin_r->weight.t());
  else
    out = torch::addmm(out, self, lin_r->weight.t());
  if (normalize_) out = F::normalize(out, F::NormalizeFuncOptions().p(2).dim(-1));
  return out;
}

torch::Tensor SageConvImpl::combine_projected(const torch::Tensor& projected, const torch::Tensor& self) {
  auto out = projected + lin_l->bias + lin_r(self);
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
  for (int64_t i = 0; i < layers(); ++i) x = activate(conv(i).forward(x, blocks[static_cast<std::size_t>(i)]), i);
  return x;
}

torch::Tensor GraphSageImpl::forward_aggregated(const torch::Tensor& self, const torch::Tensor& aggregated,
                                                const std::vector<BlockEdges>& blocks) {
  TORCH_CHECK(static_cast<int64_t>(blocks.size()) + 1 == layers(), "GraphSAGE: ", layers(), " layers but ",
              blocks.size() + 1, " blocks (sampler.fanouts needs one fanout per layer)");
  auto x = activate(conv(0).combine(aggregated, self), 0);
  for (int64_t i = 1; i < layers(); ++i) x = activate(conv(i).forward(x, blocks[static_cast<std::size_t>(i - 1)]), i);
  return x;
}

torch::Tensor GraphSageImpl::activate(torch::Tensor x, int64_t i) {
  if (i + 1 == layers()) return x;
  return relu_dropout(x, dropout_, is_training());
}

void declare_config(ConfigSchema& schema, GraphSageConfig& config) {
  schema.add("model.hidden", &config.hidden, "graphsage: the same").min(1).max(1e6);
  schema.add("model.aggregation", &config.aggregation, "graphsage: how a node combines its neighbours' features")
      .choices({"mean", "max", "sum"});
  schema.add("model.normalize", &config.normalize, "graphsage: L2-normalise each layer's output");
  schema.add("model.dropout", &config.dropout, "graphsage: dropout between layers").min(0).less_than(1);
}

}  // namespace ddp
