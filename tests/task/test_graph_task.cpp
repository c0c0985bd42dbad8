// The graph task's two shortcuts give the model's own arithmetic: the first layer aggregated in the
// prefetch threads (Note [First layer in the pipeline]) and layer-wise inference over every
// neighbour (Note [Layer-wise inference]), for each aggregation, normalised or not, on three layers.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/data/neighbor_sampler.h"
#include "ddp/task/graph_task.h"
#include "support/npy_writer.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;

namespace {

// 300 nodes, 12 features, 3 classes, in-degrees 0 to 17 (fanouts of 4 and 3 then sample some).
std::string write_graph(const test::TempDir& dir) {
  std::string d = dir.file("graph");
  std::filesystem::create_directories(d);
  torch::manual_seed(5);
  const int64_t n = 300;
  auto dst = torch::randint(0, n, {2500}, torch::kInt64), src = torch::randint(0, n, {2500}, torch::kInt64);
  test::write_npy(d + "/features.npy", torch::randn({n, 12}));
  test::write_npy(d + "/labels.npy", torch::randint(0, 3, {n}, torch::kInt64));
  test::write_npy(d + "/edge_index.npy", torch::stack({src, dst}));
  test::write_npy(d + "/train_idx.npy", torch::arange(0, 200, torch::kInt64));
  test::write_npy(d + "/val_idx.npy", torch::arange(200, 300, torch::kInt64));
  return d;
}

std::unique_ptr<GraphTask> make(const std::string& graph, const std::string& aggregation, bool normalize,
                                bool full_neighbourhood) {
  DataConfig data;
  data.dataset = "graph";
  data.path = graph;
  data.eval_split = "val";
  data.cache_dir = "none";
  SamplerConfig sampler;
  sampler.fanouts = {4, 3, 3};
  ModelConfig model;
  model.name = "graphsage";
  model.graphsage.hidden = {8, 6};
  model.graphsage.aggregation = aggregation;
  model.graphsage.normalize = normalize;
  model.num_classes = 3;
  TaskContext context;
  context.full_neighbourhood_eval = full_neighbourhood;
  torch::manual_seed(1);
  return std::make_unique<GraphTask>(data, sampler, model, LossConfig{}, context);
}

// The model's own forward over `fanouts`-sampled blocks of `seeds` (all features gathered first).
torch::Tensor reference_loss(GraphTask& task, const Graph& graph, const torch::Tensor& seeds,
                             const std::vector<int64_t>& fanouts, int64_t epoch) {
  auto subgraph = sample_subgraph(graph, seeds, fanouts, {0, epoch});
  std::vector<BlockEdges> blocks;
  for (const auto& b : subgraph.blocks) blocks.push_back({b.src, b.dst, b.num_dst});
  auto& model = dynamic_cast<GraphSageImpl&>(task.model());
  auto logits = model.forward(graph.features.index_select(0, subgraph.nodes), blocks);
  return torch::nn::functional::cross_entropy(logits, graph.labels.index_select(0, seeds),
                                              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

}  // namespace

TEST_CASE("the first layer aggregated in the prefetch threads gives the model's own forward", "[graph][task]") {
  test::TempDir dir;
  std::string path = write_graph(dir);
  Graph graph = load_graph_directory(path);
  for (std::string aggregation : {"mean", "max", "sum"})
    for (bool normalize : {false, true}) {
      INFO(aggregation << (normalize ? ", normalised" : ""));
      auto task = make(path, aggregation, normalize, false);
      task->model().eval();
      task->set_epoch(3);
      auto indices = torch::arange(10, 74, torch::kInt64);  // positions in train_idx: nodes 10..73
      Batch batch = task->make_batch(Split::kTrain, indices);
      CHECK(batch.sampled_edges > 0);
      torch::NoGradGuard no_grad;
      double ours = task->loss(batch).item<double>() * 64;
      double reference = reference_loss(*task, graph, indices, {4, 3, 3}, 3).item<double>();
      CHECK(ours == Approx(reference).epsilon(1e-5));
    }
}

TEST_CASE("eval.full_neighbourhood gives the model over every neighbour, and follows the weights", "[graph][task]") {
  test::TempDir dir;
  std::string path = write_graph(dir);
  Graph graph = load_graph_directory(path);
  for (std::string aggregation : {"mean", "max", "sum"}) {
    INFO(aggregation);
    auto task = make(path, aggregation, aggregation == "sum", true);
    task->model().eval();
    torch::NoGradGuard no_grad;
    auto indices = torch::arange(0, 100, torch::kInt64);  // the whole val split
    auto seeds = graph.val;
    double sampled_fanouts = reference_loss(*task, graph, seeds, {4, 3, 3}, -1).item<double>();
    double every = reference_loss(*task, graph, seeds, {-1, -1, -1}, -1).item<double>();
    REQUIRE(every != Approx(sampled_fanouts).epsilon(1e-3));  // the two differ here, so the check below can fail
    double ours = task->metric_sums(task->make_batch(Split::kEval, indices))[0].item<double>();
    CHECK(ours == Approx(every).epsilon(1e-4));
    // A changed weight (as an optimizer step changes it) is seen at the next evaluation.
    for (auto& p : task->model().parameters()) p.add_(0.2);
    double after = reference_loss(*task, graph, seeds, {-1, -1, -1}, -1).item<double>();
    REQUIRE(after != Approx(every).epsilon(1e-3));
    CHECK(task->metric_sums(task->make_batch(Split::kEval, indices))[0].item<double>() == Approx(after).epsilon(1e-4));
  }
}

}  // namespace DDP_TEST_FILE
