// train.task: the registry lists its tasks, builds the one the key names, and refuses a key that the
// task does not train with, naming the key and what the task takes instead.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/task/graph_task.h"
#include "ddp/task/supervised_task.h"
#include "ddp/task/task_config.h"
#include "support/npy_writer.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;
using Catch::Equals;

namespace {

struct Configs {
  TaskConfig task;
  DataConfig data;
  SamplerConfig sampler;
  ModelConfig model;
  LossConfig loss;
};

Configs synthetic(const std::string& task, const std::string& loss) {
  Configs c;
  c.task.task = task;
  c.loss.loss = loss;
  c.data.dataset = "synthetic";
  c.data.synthetic_train_samples = 64;
  c.data.synthetic_test_samples = 16;
  c.model.name = "mlp";
  c.model.mlp.hidden = {8};
  return c;
}

std::unique_ptr<Task> make(const Configs& c) { return make_task(c.task, c.data, c.sampler, c.model, c.loss, {}); }

std::string problem_of(const Configs& c) {
  try {
    make(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the task registry lists its tasks and the models they build themselves", "[task]") {
  CHECK(task_names() == std::vector<std::string>{"causal_lm", "classification", "node_classification", "regression"});
  CHECK(task_built_models() == std::vector<std::string>{"graphsage"});  // the GPT is the model registry's
  CHECK(TaskConfig{}.task == "classification");
}

TEST_CASE("train.task chooses the task, whatever the model is called", "[task]") {
  auto classification = make(synthetic("classification", "cross_entropy"));
  REQUIRE(dynamic_cast<SupervisedTask*>(classification.get()) != nullptr);
  CHECK(classification->metric_names() == std::vector<std::string>{"loss", "accuracy"});
  auto regression = make(synthetic("regression", "mse"));
  REQUIRE(dynamic_cast<SupervisedTask*>(regression.get()) != nullptr);
  CHECK(regression->metric_names() == std::vector<std::string>{"mse", "mae"});

  test::TempDir dir;
  std::string graph = dir.file("graph");
  std::filesystem::create_directories(graph);
  test::write_npy(graph + "/features.npy", torch::randn({20, 4}));
  test::write_npy(graph + "/labels.npy", torch::arange(20, torch::kInt64) % 2);
  test::write_npy(graph + "/edge_index.npy", torch::stack({torch::arange(20, torch::kInt64), (torch::arange(20, torch::kInt64) + 1) % 20}));
  test::write_npy(graph + "/train_idx.npy", torch::arange(0, 15, torch::kInt64));
  Configs nodes;
  nodes.task.task = "node_classification";
  nodes.data.dataset = "graph";
  nodes.data.path = graph;
  nodes.data.eval_split = "none";
  nodes.data.cache_dir = "none";
  nodes.model.name = "graphsage";
  nodes.model.graphsage.hidden = {8};
  nodes.model.num_classes = 2;
  auto node_task = make(nodes);
  REQUIRE(dynamic_cast<GraphTask*>(node_task.get()) != nullptr);
  CHECK(node_task->size(Split::kTrain) == 15);
}

TEST_CASE("a key the task does not train with is named, with what the task takes", "[task]") {
  CHECK_THAT(problem_of(synthetic("classification", "mse")),
             Equals("train.loss: mse trains with train.task: regression, not classification (train.task classification "
                    "takes train.loss: cross_entropy or bce_with_logits)"));
  CHECK_THAT(problem_of(synthetic("regression", "cross_entropy")),
             Equals("train.loss: cross_entropy trains with train.task: causal_lm, classification or node_classification, not "
                    "regression (train.task regression takes train.loss: mse)"));
  Configs graph = synthetic("classification", "cross_entropy");
  graph.data.dataset = "graph";
  graph.model.name = "graphsage";
  CHECK_THAT(problem_of(graph),
             Equals("data.dataset: graph trains with train.task: node_classification, not classification (train.task "
                    "classification takes data.dataset: criteo, csv, idx, npy or synthetic)\n"
                    "model.name: graphsage trains with train.task: node_classification, not classification (train.task "
                    "classification takes model.name: convnet, dlrm, linear3, mlp or torchscript)"));
  Configs samples = synthetic("node_classification", "cross_entropy");
  CHECK_THAT(problem_of(samples),
             Equals("data.dataset: synthetic trains with train.task: classification or regression, not "
                    "node_classification (train.task node_classification takes data.dataset: graph)\n"
                    "model.name: mlp trains with train.task: classification or regression, not node_classification "
                    "(train.task node_classification takes model.name: graphsage)"));
  Configs tokens = synthetic("classification", "cross_entropy");
  tokens.data.dataset = "tokens";
  tokens.model.name = "gpt";
  CHECK_THAT(problem_of(tokens),
             Equals("data.dataset: tokens trains with train.task: causal_lm, not classification (train.task "
                    "classification takes data.dataset: criteo, csv, idx, npy or synthetic)\n"
                    "model.name: gpt trains with train.task: causal_lm, not classification (train.task "
                    "classification takes model.name: convnet, dlrm, linear3, mlp or torchscript)"));
  // Values no task takes are left to the keys' own choices.
  Configs unknown = synthetic("classification", "hinge");
  unknown.model.name = "resnet";
  unknown.data.dataset = "imagenet";
  CHECK(task_mismatches(unknown.task, unknown.data, unknown.model, unknown.loss).empty());
}

TEST_CASE("an unknown train.task names the nearest", "[task]") {
  CHECK_THAT(problem_of(synthetic("clasification", "cross_entropy")),
             Equals("train.task: unknown task \"clasification\" (did you mean classification?); available: "
                    "causal_lm, classification, node_classification, regression"));
}

}  // namespace DDP_TEST_FILE
