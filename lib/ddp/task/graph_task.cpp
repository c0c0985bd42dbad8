#include "ddp/task/graph_task.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "ddp/common/error.h"
#include "ddp/data/checksum64.h"
#include "ddp/data/graph_cache.h"
#include "ddp/data/node_cache.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/task/task_registry.h"

namespace ddp {

GraphTask::GraphTask(const DataConfig& data, const SamplerConfig& sampler, const ModelConfig& model,
                     const LossConfig& loss, const TaskContext& context)
    : fanouts_(sampler.fanouts),
      sampler_seed_(sampler.seed),
      aggregation_(model.graphsage.aggregation),
      full_neighbourhood_eval_(context.full_neighbourhood_eval),
      device_(context.device),
      loss_(loss) {
  if (fanouts_.size() != model.graphsage.hidden.size() + 1)
    throw ConfigError("sampler.fanouts: one fanout per layer: model.hidden has " +
                      std::to_string(model.graphsage.hidden.size()) + " width(s), so " +
                      std::to_string(model.graphsage.hidden.size() + 1) + " layers, but " +
                      std::to_string(fanouts_.size()) + " fanout(s) are given");
  graph_ = load_graph_cached(data.path, resolve_cache_dir(data.cache_dir));
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
  options.hidden = model.graphsage.hidden;
  options.aggregation = model.graphsage.aggregation;
  options.normalize = model.graphsage.normalize;
  options.dropout = model.graphsage.dropout;
  build_model(context.model, [&] { model_ = GraphSage(options); });
  if (!model.init_from.empty() && model.init_from_gone_run_dir.empty())
    load_python_state_dict(*model_, model.init_from);
  model_->to(context.device);
}

int64_t GraphTask::size(Split split) const {
  if (split == Split::kTrain) return graph_.train.numel();
  return eval_nodes_.defined() ? eval_nodes_.numel() : 0;
}

std::string GraphTask::data_content() const {
  // The training node ids whole, the graph's sizes, and the labels, features and in-neighbours of 64
  // training nodes spread over the list: a graph whose splits, features or edges were rewritten at
  // the same sizes resumed silently (only the count of training nodes was compared).
  Checksum64 sum;
  auto add = [&sum](const torch::Tensor& values) {
    const torch::Tensor whole = values.contiguous();
    sum.update(whole.data_ptr(), static_cast<std::size_t>(whole.numel()) * whole.element_size());
  };
  add(graph_.train);
  const int64_t sizes[] = {graph_.num_nodes(), graph_.num_edges(), graph_.num_features()};
  sum.update(sizes, sizeof sizes);
  const int64_t n = graph_.train.numel(), taken = std::min<int64_t>(n, 64);
  if (taken == 0) return fmt::format("{:016x}", sum.digest());
  auto positions = torch::linspace(0, static_cast<double>(n - 1), taken, torch::kDouble).round().to(torch::kLong);
  const torch::Tensor nodes = graph_.train.index_select(0, positions).contiguous();
  add(graph_.labels.index_select(0, nodes));
  add(graph_.feature_rows(nodes));
  const int64_t* ids = nodes.data_ptr<int64_t>();
  const torch::Tensor indptr = graph_.indptr.contiguous();
  const int64_t* offsets = indptr.data_ptr<int64_t>();
  std::vector<int64_t> neighbours;
  for (int64_t i = 0; i < taken; ++i) {
    neighbours.resize(static_cast<std::size_t>(offsets[ids[i] + 1] - offsets[ids[i]]));
    graph_.read_indices(offsets[ids[i]], static_cast<int64_t>(neighbours.size()), neighbours.data());
    sum.update(neighbours.data(), neighbours.size() * sizeof(int64_t));
  }
  return fmt::format("{:016x}", sum.digest());
}

// Note [First layer in the pipeline]
// The first layer's input is every sampled node's features: on a Reddit-sized graph with fanouts
// [25, 10], a batch of 1024 seeds reaches ~95k nodes, 230 MB of features. Its aggregation is of
// constants (features need no gradient), so the prefetch threads do it, reading each sampled node's
// row once (~95k of the batch's ~220k edges' sources) straight into the sums, and the batch carries
// only the aggregated features of the first layer's output nodes (~22k rows). On the CPU their own
// rows are read at the step, so that a batch waiting in the queue holds half as much; with the
// model on a GPU the prefetch threads read them too, since reading them on the step's thread left
// the GPU idle for most of the step (70 of 75 ms on an H100). The result is
// SageConv::forward's up to the order of a sum's terms: here a node's neighbours in id order, the
// same in any batch, so world sizes agree and a resumed run repeats itself exactly.

Batch GraphTask::make_batch(Split split, const torch::Tensor& indices) const {
  const torch::Tensor& nodes = split == Split::kTrain ? graph_.train : eval_nodes_;
  torch::Tensor seeds = nodes.index_select(0, indices.to(torch::kInt64));
  // Evaluation draws from a key of its own, the same at every eval: its numbers compare across epochs.
  SampleKey key{sampler_seed_, split == Split::kTrain ? epoch_.load() : -1};
  Batch batch;
  batch.targets = graph_.labels.index_select(0, seeds);
  if (split != Split::kTrain && full_neighbourhood_eval_) {
    SampledSubgraph subgraph = sample_subgraph(graph_, seeds, {-1}, key);
    const Block& block = subgraph.blocks[0];
    batch.inputs = {subgraph.nodes, block.src, block.dst, torch::tensor(block.num_dst, torch::kInt64)};
    return batch;
  }
  SampledSubgraph subgraph = sample_subgraph(graph_, seeds, fanouts_, key);
  for (const auto& block : subgraph.blocks) batch.sampled_edges += block.src.numel();
  // See Note [First layer in the pipeline] for where the first layer's own rows are read.
  auto own = subgraph.nodes.narrow(0, 0, subgraph.blocks[0].num_dst);
  batch.inputs.push_back(device_.is_cuda() ? graph_.feature_rows(own) : own.clone());
  batch.inputs.push_back(aggregate_first_layer(subgraph));
  for (std::size_t i = 1; i < subgraph.blocks.size(); ++i) {
    const Block& block = subgraph.blocks[i];
    batch.inputs.push_back(block.src);
    batch.inputs.push_back(block.dst);
    batch.inputs.push_back(torch::tensor(block.num_dst, torch::kInt64));
  }
  return batch;
}

torch::Tensor GraphTask::aggregate_first_layer(const SampledSubgraph& subgraph) const {
  constexpr int64_t kMaxRun = 64;  // rows per read: 150 KB of 602 features, in the L2 cache
  const Block& block = subgraph.blocks[0];
  const int64_t width = graph_.num_features(), edges = block.dst.numel();
  const int64_t *src = block.src.data_ptr<int64_t>(), *dst = block.dst.data_ptr<int64_t>();
  const int64_t* nodes = subgraph.nodes.data_ptr<int64_t>();
  // The edges by their source's node id: a row is read once for all the destinations it feeds, a run
  // of consecutive ids in one read, and each destination sums its neighbours in id order in any batch.
  std::vector<std::pair<int64_t, int64_t>> by_source(static_cast<std::size_t>(edges));  // (source node, destination)
  for (int64_t e = 0; e < edges; ++e) by_source[static_cast<std::size_t>(e)] = {nodes[src[e]], dst[e]};
  std::sort(by_source.begin(), by_source.end());

  const bool max = aggregation_ == "max";
  auto aggregated = torch::zeros({block.num_dst, width}, torch::kFloat32);
  float* out = aggregated.data_ptr<float>();
  std::vector<int64_t> counts(static_cast<std::size_t>(block.num_dst), 0);
  std::vector<float> rows(static_cast<std::size_t>(kMaxRun * width));
  for (std::size_t i = 0; i < by_source.size();) {
    const int64_t first = by_source[i].first;
    int64_t last = first;
    std::size_t end = i;
    for (; end < by_source.size(); ++end) {
      int64_t node = by_source[end].first;
      if (node != last && (node != last + 1 || node - first >= kMaxRun)) break;
      last = node;
    }
    graph_.read_feature_rows(first, last - first + 1, rows.data());
    for (; i < end; ++i) {
      const float* row = rows.data() + (by_source[i].first - first) * width;
      const auto d = static_cast<std::size_t>(by_source[i].second);
      float* sum = out + static_cast<int64_t>(d) * width;
      if (!max) {
        for (int64_t f = 0; f < width; ++f) sum[f] += row[f];
      } else if (counts[d] == 0) {
        std::copy_n(row, width, sum);
      } else {
        for (int64_t f = 0; f < width; ++f) sum[f] = std::max(sum[f], row[f]);
      }
      ++counts[d];
    }
  }
  if (aggregation_ == "mean") {
    auto divisor = torch::from_blob(counts.data(), {block.num_dst}, torch::kInt64).clamp_min(1).to(torch::kFloat32);
    aggregated.div_(divisor.unsqueeze(1));
  }
  return aggregated;
}

torch::Tensor GraphTask::feature_range(int64_t first, int64_t last) const {
  if (!graph_.feature_file) return graph_.features.slice(0, first, last);
  auto rows = torch::empty({last - first, graph_.num_features()}, torch::kFloat32);
  graph_.read_feature_rows(first, last - first, rows.data_ptr<float>());
  return rows;
}

// Note [Layer-wise inference]
// eval.full_neighbourhood computes, as PyG's `inference`, every layer but the last for all nodes
// with all their neighbours, a layer at a time, then the last layer for the eval batch's nodes. Each
// rank computes the full layers itself (no communication; the accuracy is summed across ranks as
// usual), once per evaluation: the model is the same for all its batches. Mean and sum commute with
// lin_l, so those project every node first and aggregate the narrower projections. The price is
// memory: every rank holds each full layer's output (N × hidden floats, 240 MB on Reddit), and
// with max aggregation, which must aggregate the features themselves, all of the features.

torch::Tensor GraphTask::last_layer_inputs() {
  // Recomputed whenever a parameter changed (an optimizer step, a loaded state: any in-place write).
  std::vector<int64_t> versions;
  for (const auto& p : model_->parameters()) versions.push_back(p._version());
  if (last_layer_inputs_.defined() && versions == last_layer_versions_) return last_layer_inputs_;
  last_layer_versions_ = versions;
  constexpr int64_t kChunkEdges = 65536, kChunkNodes = 4096;
  const int64_t n = graph_.num_nodes();
  const int64_t* indptr = graph_.indptr.data_ptr<int64_t>();
  torch::Tensor x;  // this layer's input for every node; undefined for the first layer: the graph's features
  auto inputs = [&](int64_t a, int64_t b) {
    return x.defined() ? x.slice(0, a, b) : feature_range(a, b).to(device_);
  };
  for (int64_t l = 0; l + 1 < model_->layers(); ++l) {
    auto& conv = model_->conv(l);
    const bool project = conv.aggregation() != "max";
    torch::Tensor source;  // what each edge carries: projections, or the inputs themselves
    if (project || !x.defined()) {
      std::vector<torch::Tensor> parts;
      for (int64_t a = 0; a < n; a += kChunkNodes) {
        auto rows = inputs(a, std::min(n, a + kChunkNodes));
        parts.push_back(project ? conv.project_neighbours(rows) : rows);
      }
      source = torch::cat(parts);
    } else {
      source = x;
    }
    std::vector<torch::Tensor> outputs;
    for (int64_t a = 0; a < n;) {
      int64_t b = a + 1;
      while (b < n && indptr[b + 1] - indptr[a] <= kChunkEdges) ++b;
      auto neighbours = torch::empty({indptr[b] - indptr[a]}, torch::kInt64);
      graph_.read_indices(indptr[a], neighbours.numel(), neighbours.data_ptr<int64_t>());
      auto degrees = graph_.indptr.slice(0, a + 1, b + 1) - graph_.indptr.slice(0, a, b);
      auto dst = torch::repeat_interleave(torch::arange(b - a, torch::kInt64), degrees).to(device_);
      auto aggregated = aggregate_messages(source.index_select(0, neighbours.to(device_)), dst, b - a, conv.aggregation());
      auto self = inputs(a, b);
      outputs.push_back(model_->activate(project ? conv.combine_projected(aggregated, self) : conv.combine(aggregated, self), l));
      a = b;
    }
    x = torch::cat(outputs);
  }
  last_layer_inputs_ = x;
  return last_layer_inputs_;
}

torch::Tensor GraphTask::forward(const Batch& batch) {
  if (!batch.inputs[1].is_floating_point()) {  // a full-neighbourhood eval batch
    const auto& nodes = batch.inputs[0];
    auto x = model_->layers() == 1 ? graph_.feature_rows(nodes.cpu()).to(device_)
                                   : last_layer_inputs().index_select(0, nodes);
    BlockEdges block{batch.inputs[1], batch.inputs[2], batch.inputs[3].item<int64_t>()};
    return model_->conv(model_->layers() - 1).forward(x, block);
  }
  std::vector<BlockEdges> blocks;
  for (std::size_t i = 2; i + 2 < batch.inputs.size(); i += 3)
    blocks.push_back({batch.inputs[i], batch.inputs[i + 1], batch.inputs[i + 2].item<int64_t>()});
  // On the CPU the first layer's own rows are read now, not held by the batches waiting in the queue.
  auto self = batch.inputs[0].is_floating_point() ? batch.inputs[0]
                                                  : graph_.feature_rows(batch.inputs[0].cpu()).to(device_);
  return model_->forward_aggregated(self, batch.inputs[1], blocks);
}

torch::Tensor GraphTask::loss(const Batch& batch) { return loss_.mean(forward(batch), batch.targets); }

torch::Tensor GraphTask::metric_sums(const Batch& batch) { return loss_.metric_sums(forward(batch), batch.targets); }

void GraphTask::save_model(const std::string& output_dir) const {
  save_model_weights(*model_, output_dir);
}

void register_graph_tasks(TaskRegistrations& tasks) {
  tasks.add("node_classification", {
      DatasetKind::kGraph, {"cross_entropy"}, {"graphsage"},
      [](const DataConfig& data, const SamplerConfig& sampler, const ModelConfig& model, const LossConfig& loss,
         const TaskContext& context) -> std::unique_ptr<Task> {
        return std::make_unique<GraphTask>(data, sampler, model, loss, context);
      }});
}

}  // namespace ddp
