#pragma once
// Node classification on a graph with GraphSAGE: a sample is a node; a batch is its seed nodes'
// sampled neighbourhood (ddp/data/neighbor_sampler.h) and their labels.

#include <atomic>
#include <memory>

#include "ddp/data/graph.h"
#include "ddp/data/neighbor_sampler.h"
#include "ddp/model/graphsage.h"
#include "ddp/task/task.h"

namespace ddp {

/// `train.task: node_classification`: `model.name: graphsage` on `data.dataset: graph`, `train.loss:
/// cross_entropy` (the registry checks them before it builds one).
class GraphTask : public Task {
 public:
  /// Loads the graph directory (data.path), builds the model from the global RNG. ConfigError or
  /// FileError naming the key or file at fault.
  GraphTask(const DataConfig& data, const SamplerConfig& sampler, const ModelConfig& model, const LossConfig& loss,
            const TaskContext& context);

  torch::nn::Module& model() override { return *model_; }
  int64_t size(Split split) const override;
  std::string data_content() const override;
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  /// inputs = {the first layer's output nodes (int64 [D]) and their neighbours' aggregated
  /// features [D, F], then per later layer: src [E], dst [E], num_dst []}; targets = the seeds'
  /// labels. See Note [First layer in the pipeline]. With eval.full_neighbourhood, an eval batch is {node ids,
  /// src, dst, num_dst}: the last layer's block over every neighbour (Note [Layer-wise inference]).
  Batch make_batch(Split split, const torch::Tensor& indices) const override;
  torch::Tensor loss(const Batch& batch) override;
  std::vector<std::string> metric_names() const override { return loss_.metric_names(); }
  torch::Tensor metric_sums(const Batch& batch) override;
  RankedScores* ranked_scores() override { return loss_.ranked_scores(); }
  void save_model(const std::string& output_dir) const override;

 private:
  torch::Tensor forward(const Batch& batch);
  torch::Tensor aggregate_first_layer(const SampledSubgraph& subgraph) const;
  torch::Tensor feature_range(int64_t first, int64_t last) const;
  torch::Tensor last_layer_inputs();

  Graph graph_;
  torch::Tensor eval_nodes_;
  std::vector<int64_t> fanouts_;
  int64_t sampler_seed_;
  std::string aggregation_;
  bool full_neighbourhood_eval_;
  torch::Device device_;  ///< the model's
  std::atomic<int64_t> epoch_{0};
  Loss loss_;
  GraphSage model_{nullptr};
  torch::Tensor last_layer_inputs_;  ///< every node's, for layer-wise inference, computed with the parameters at:
  std::vector<int64_t> last_layer_versions_;
};

}  // namespace ddp
