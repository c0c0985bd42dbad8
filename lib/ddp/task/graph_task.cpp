#include "ddp/task/graph_task.h"

#include "ddp/common/error.h"
#include "ddp/data/neighbor_sampler.h"
#include "ddp/model/python_state_dict.h"

namespace ddp {

GraphTask::GraphTask(const DataConfig& data, const SamplerConfig& sampler, const ModelConfig& model,
                     const LossConfig& loss, const TaskContext& context)
    : fanouts_(sampler.fanouts), sampler_seed_(sampler.seed), loss_(loss) {
  if (data.dataset != "graph")
    throw ConfigError("model.name: graphsage trains on a graph (data.dataset: graph), not on data.dataset: " + data.dataset);
  if (loss.loss != "cross_entropy")
    throw ConfigError("train.loss: graphsage classifies nodes (cross_entropy), got " + loss.loss);
  if (fanouts_.size() != model.hidden.size() + 1)
    throw ConfigError("sampler.fanouts: one fanout per layer: model.hidden has " + std::to_string(model.hidden.size()) +
                      " width(s), so " + std::to_string(model.hidden.size() + 1) + " layers, but " +
                      std::to_string(fanouts_.size()) + " fanout(s) are given");
  graph_ = load_graph_directory(data.path);
  if (data.eval_split == "val") eval_nodes_ = graph_.val;
  if (data.eval_split == "test") eval_nodes_ = graph_.test;
  if (data.eval_split == "train") eval_nodes_ = graph_.train;
  if (data.eval_split != "none" && eval_nodes_.numel() == 0)
    throw FileError("data.eval_split: " + data.path + " has no " + data.eval_split + " nodes (" + data.eval_split +
                    "_idx.npy or " + data.eval_split + "_mask.npy)");
  if (graph_.num_classes() > model.num_classes)
    throw ConfigError("model.num_classes: " + std::to_string(model.num_classes) + " is too few for " + data.path +
                      ", whose labels go up to " + std::to_string(graph_.num_classes() - 1));
  GraphSageOptions options;
  options.in = graph_.num_features();
  options.out = model.num_classes;
  options.hidden = model.hidden;
  options.aggregation = model.aggregation;
  options.normalize = model.normalize;
  options.dropout = model.dropout;
  model_ = GraphSage(options);
  if (!model.init_from.empty()) load_python_state_dict(*model_, model.init_from);
  model_->to(context.device);
}

int64_t GraphTask::size(Split split) const {
  if (split == Split::kTrain) return graph_.train.numel();
  return eval_nodes_.defined() ? eval_nodes_.numel() : 0;
}

Batch GraphTask::make_batch(Split split, const torch::Tensor& indices) const {
  const torch::Tensor& nodes = split == Split::kTrain ? graph_.train : eval_nodes_;
  torch::Tensor seeds = nodes.index_select(0, indices.to(torch::kInt64));
  // Evaluation draws from a key of its own, the same at every eval: its numbers compare across epochs.
  SampleKey key{sampler_seed_, split == Split::kTrain ? epoch_.load() : -1};
  SampledSubgraph subgraph = sample_subgraph(graph_, seeds, fanouts_, key);
  Batch batch;
  batch.inputs.push_back(graph_.features.index_select(0, subgraph.nodes));
  for (const auto& block : subgraph.blocks) {
    batch.inputs.push_back(block.src);
    batch.inputs.push_back(block.dst);
    batch.inputs.push_back(torch::tensor(block.num_dst, torch::kInt64));
  }
  batch.targets = graph_.labels.index_select(0, seeds);
  return batch;
}

torch::Tensor GraphTask::forward(const Batch& batch) {
  std::vector<BlockEdges> blocks;
  for (std::size_t i = 1; i + 2 < batch.inputs.size(); i += 3)
    blocks.push_back({batch.inputs[i], batch.inputs[i + 1], batch.inputs[i + 2].item<int64_t>()});
  return model_->forward(batch.inputs[0], blocks);
}

torch::Tensor GraphTask::loss(const Batch& batch) { return loss_.mean(forward(batch), batch.targets); }

torch::Tensor GraphTask::metric_sums(const Batch& batch) { return loss_.metric_sums(forward(batch), batch.targets); }

void GraphTask::save_model(const std::string& output_dir) const {
  save_python_state_dict(*model_, output_dir + "/model.pt");
}

}  // namespace ddp
