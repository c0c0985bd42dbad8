// GraphSAGE trained by ddprun on a graph directory: it learns, its model.pt loads strictly into a
// pure-torch SAGE in Python that gives the accuracy ddprun reported, world 1 with batch 2B matches
// world 2 with batch B, and a stopped run resumes bit-identically.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "ddp/data/npy_reader.h"
#include "ddp/record/metrics_reader.h"
#include "support/npy_writer.h"
#include "support/subprocess.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

// 600 nodes in 3 classes; features: a noisy hint of the class; 5 in-neighbours each, 4 of them of the
// node's own class. The neighbours carry what a node's own features lack, so GraphSAGE learns it.
std::string make_graph(const TempDir& dir) {
  std::string d = dir.file("graph");
  std::filesystem::create_directories(d);
  torch::manual_seed(11);
  const int64_t n = 600, classes = 3, degree = 5;
  auto labels = torch::arange(n, torch::kInt64) % classes;
  auto features = torch::randn({n, 8}) * 1.5;
  features.narrow(1, 0, classes).add_(torch::one_hot(labels, classes).to(torch::kFloat32));
  std::vector<int64_t> src, dst;
  for (int64_t v = 0; v < n; ++v)
    for (int64_t k = 0; k < degree; ++k) {
      int64_t same = (v + classes * (1 + k * 7 + v % 5)) % n;  // same class: a multiple of 3 away
      int64_t other = (v + 1 + 3 * k) % n;
      src.push_back(k < 4 ? same : other);
      dst.push_back(v);
    }
  write_npy(d + "/features.npy", features);
  write_npy(d + "/labels.npy", labels);
  write_npy(d + "/edge_index.npy", torch::stack({torch::tensor(src, torch::kInt64), torch::tensor(dst, torch::kInt64)}));
  auto perm = torch::randperm(n, torch::kInt64);
  write_npy(d + "/train_idx.npy", perm.narrow(0, 0, 400));
  write_npy(d + "/val_idx.npy", perm.narrow(0, 400, 100));
  write_npy(d + "/test_idx.npy", perm.narrow(0, 500, 100));
  return d;
}

std::string graph_run(int nproc, const std::string& graph, const std::string& out, const std::string& sets) {
  return "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " + std::to_string(nproc) + " " +
         std::string(DDP_SOURCE_DIR) + "/configs/graphsage_fashion_knn.yaml --set data.path=" + graph +
         " --set run.output_dir=" + out + " --set model.hidden=[32] --set sampler.fanouts=[10,10] " +
         "--set eval.batch_size=64 --set train.log_every=5 " + sets;
}

}  // namespace

TEST_CASE("GraphSAGE learns a graph at world 2, and its model.pt gives the same accuracy in pure torch", "[graph][slow]") {
  TempDir dir;
  std::string graph = make_graph(dir), out = dir.file("run");
  auto r = run_shell(graph_run(2, graph, out, "--set train.epochs=20 --set train.batch_size=32 --set optim.lr=0.02"), std::chrono::seconds(300));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("world size 2"));
  auto run = ddp::read_run(out);
  auto accuracy = run.last("eval_accuracy");
  REQUIRE(accuracy);
  CHECK(*accuracy > 0.8);  // features alone give about 0.5
  // Every node has 5 in-neighbours and the fanouts are 10: evaluation saw whole neighbourhoods, as Python does.
  auto python = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/eval_graphsage.py",
                             out + "/model.pt", graph, "val"},
                            std::chrono::seconds(120));
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);
  CHECK(std::abs(std::stod(python.out) - *accuracy) <= 0.011);  // at most one of 100 nodes on a rounding edge
  // ddp-export has no Hugging Face form for it, and says where its weights are.
  auto exported = run_command({bin("ddp-export"), out}, std::chrono::seconds(60));
  CHECK(exported.exit_code == 2);
  CHECK_THAT(exported.err, Contains("trained model.name graphsage, which has no Hugging Face form to export: its "
                                    "weights are " + out + "/model.pt"));
}

TEST_CASE("GraphSAGE at world 1 with batch 2B equals world 2 with batch B after 20 Adam steps", "[graph][slow]") {
  TempDir dir;
  std::string graph = make_graph(dir);
  std::string common = "--set train.max_steps=20 --set optim.name=adam --set optim.lr=0.01 --set model.dropout=0 "
                       "--set data.eval_split=none --set checkpoint.every_epochs=0 ";
  auto one = run_shell(graph_run(1, graph, dir.file("w1"), common + "--set train.batch_size=16"), std::chrono::seconds(300));
  auto two = run_shell(graph_run(2, graph, dir.file("w2"), common + "--set train.batch_size=8"), std::chrono::seconds(300));
  INFO(one.out << one.err << two.out << two.err);
  REQUIRE(one.exit_code == 0);
  REQUIRE(two.exit_code == 0);
  auto a = load_weights(dir.file("w1/model.pt")), b = load_weights(dir.file("w2/model.pt"));
  REQUIRE(a.size() == 6);  // convs.{0,1}.lin_l.{weight,bias}, convs.{0,1}.lin_r.weight
  for (const auto& [name, tensor] : a) {
    INFO(name);
    CHECK((tensor - b.at(name)).abs().max().item<double>() < 1e-5);
  }
}

TEST_CASE("a GraphSAGE run stopped at step 15 resumes to the same model.pt as a run never stopped", "[graph][slow]") {
  TempDir dir;
  std::string graph = make_graph(dir);
  std::string common = "--set checkpoint.every_steps=15 --set checkpoint.every_epochs=0 --set data.eval_split=none "
                       "--set train.batch_size=32 ";  // dropout 0.5: each rank's generator must resume as it was
  REQUIRE(run_shell(graph_run(2, graph, dir.file("straight"), common + "--set train.max_steps=30"),
                    std::chrono::seconds(300)).exit_code == 0);
  REQUIRE(run_shell(graph_run(2, graph, dir.file("resumed"), common + "--set train.max_steps=15"),
                    std::chrono::seconds(300)).exit_code == 0);
  auto resumed = run_shell(graph_run(2, graph, dir.file("resumed"), common + "--set train.max_steps=30"),
                           std::chrono::seconds(300));
  INFO(resumed.out << resumed.err);
  CHECK_THAT(resumed.out, Contains("resumed from") && Contains("at step 15 (in epoch 3, after 1 of its "));
  std::string x = read_file(dir.file("straight/model.pt")), y = read_file(dir.file("resumed/model.pt"));
  CHECK(!x.empty());
  CHECK(x == y);
  // The graph rewritten in place at the same sizes: the features reversed, or the splits shuffled.
  // Its resume is refused, naming the data (was: resumed on it without a word).
  auto changed = [&](const std::vector<std::pair<std::string, torch::Tensor>>& files) {
    std::vector<torch::Tensor> kept;
    for (const auto& [file, values] : files) {
      kept.push_back(ddp::read_npy(graph + "/" + file));
      write_npy(graph + "/" + file, values);
    }
    auto r = run_shell(graph_run(2, graph, dir.file("resumed"), common + "--set train.max_steps=45"),
                       std::chrono::seconds(300));
    INFO(files.front().first << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("data.path: the training data are not those"));
    for (std::size_t i = 0; i < files.size(); ++i) write_npy(graph + "/" + files[i].first, kept[i]);
  };
  changed({{"features.npy", ddp::read_npy(graph + "/features.npy").flip({0}).contiguous()}});
  auto train = ddp::read_npy(graph + "/train_idx.npy"), val = ddp::read_npy(graph + "/val_idx.npy");
  changed({{"train_idx.npy", torch::cat({val, train.narrow(0, 100, 300)})}, {"val_idx.npy", train.narrow(0, 0, 100)}});
  CHECK(read_file(dir.file("resumed/model.pt")) == y);
}

TEST_CASE("graph configs that cannot work are refused with one line naming the key", "[graph]") {
  TempDir dir;
  std::string graph = make_graph(dir);
  auto fanouts = run_shell(graph_run(1, graph, dir.file("a"), "--set sampler.fanouts=[10]"));
  CHECK(fanouts.exit_code == 2);
  CHECK_THAT(fanouts.err, Contains("sampler.fanouts: one fanout per layer: model.hidden has 1 width(s), so 2 layers, "
                                   "but 1 fanout(s) are given"));
  auto dataset = run_shell(graph_run(1, graph, dir.file("b"), "--set data.dataset=idx --set data.eval_split=test"));
  CHECK(dataset.exit_code == 2);
  CHECK_THAT(dataset.err, Contains("data.dataset: idx trains with train.task: classification or regression, not "
                                   "node_classification (train.task node_classification takes data.dataset: graph)"));
  auto mlp = run_shell(graph_run(1, graph, dir.file("c"), "--set model.name=mlp"));
  CHECK(mlp.exit_code == 2);
  CHECK_THAT(mlp.err, Contains("model.name: mlp trains with train.task: classification or regression, not "
                               "node_classification (train.task node_classification takes model.name: graphsage)"));
  auto val = run_shell(graph_run(1, graph, dir.file("d"), "--set data.dataset=idx"));
  CHECK(val.exit_code == 2);
  CHECK_THAT(val.err, Contains("data.eval_split: val is a graph's split (data.dataset: graph)"));
  auto full = run_shell(graph_run(1, graph, dir.file("d2"), "--set data.dataset=idx --set data.eval_split=test "
                                                             "--set eval.full_neighbourhood=true"));
  CHECK(full.exit_code == 2);
  CHECK_THAT(full.err, Contains("eval.full_neighbourhood: evaluating over every neighbour is for graphs (data.dataset: graph)"));
  auto checkpointed = run_shell(graph_run(1, graph, dir.file("d3"), "--set model.activation_checkpointing=full"));
  CHECK(checkpointed.exit_code == 2);
  CHECK_THAT(checkpointed.err, Contains("model.activation_checkpointing: model.name graphsage cannot be checkpointed "
                                        "block by block: it is not a sequence of layers, or use "
                                        "model.activation_checkpointing: none"));
  auto loss = run_shell(graph_run(1, graph, dir.file("e"), "--set train.loss=mse"));
  CHECK(loss.exit_code == 2);
  CHECK_THAT(loss.err, Contains("train.loss: mse trains with train.task: regression, not node_classification "
                                "(train.task node_classification takes train.loss: cross_entropy)"));
  auto task = run_shell(graph_run(1, graph, dir.file("e2"), "--set train.task=classification"));
  CHECK(task.exit_code == 2);
  CHECK_THAT(task.err, Contains("data.dataset: graph trains with train.task: node_classification, not classification"));
  CHECK_THAT(task.err, Contains("model.name: graphsage trains with train.task: node_classification, not classification"));
  auto classes = run_shell(graph_run(1, graph, dir.file("f"), "--set model.num_classes=2"));
  CHECK(classes.exit_code == 2);
  CHECK_THAT(classes.err, Contains("model.num_classes: 2 is too few for " + graph + ", whose labels go up to 2"));
  std::filesystem::remove(graph + "/test_idx.npy");
  auto no_test = run_shell(graph_run(1, graph, dir.file("g"), "--set data.eval_split=test"));
  CHECK(no_test.exit_code == 2);
  CHECK_THAT(no_test.err, Contains("data.eval_split: " + graph + " has no test nodes (test_idx.npy or test_mask.npy)"));
}

TEST_CASE("the Fashion-MNIST kNN graph: GraphSAGE beats the same network without neighbours, and Python agrees",
          "[graph][slow]") {
  TempDir dir;
  std::string graph = dir.file("knn");
  auto made = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_fashion_knn.py", graph},
                          std::chrono::seconds(300));
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  CHECK_THAT(made.out, Contains("70000 nodes, 700000 edges, 50 features, label homophily 0.81"));
  auto train = [&](const std::string& name, const std::string& extra) {
    std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                          std::string(DDP_SOURCE_DIR) + "/configs/graphsage_fashion_knn.yaml --set data.path=" + graph +
                          " --set run.output_dir=" + dir.file(name) +
                          " --set data.eval_split=test --set eval.at_start=false --set train.epochs=2 " + extra;
    auto r = run_shell(command, std::chrono::seconds(300));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return ddp::read_run(dir.file(name)).last("eval_accuracy").value_or(0);
  };
  double graphsage = train("graphsage", "");
  double without = train("mlp", "--set sampler.fanouts=[0,0]");  // no neighbours: lin_r alone, an MLP
  INFO("GraphSAGE " << graphsage << ", without neighbours " << without);
  CHECK(graphsage > without + 0.01);
  // Every node has 10 in-neighbours and the fanouts are 25 and 10: evaluation saw whole neighbourhoods.
  auto python = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/eval_graphsage.py",
                             dir.file("graphsage/model.pt"), graph, "test"},
                            std::chrono::seconds(120));
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);
  CHECK(std::abs(std::stod(python.out) - graphsage) <= 2e-4);  // at most two of 10,000 nodes on a rounding edge
}

TEST_CASE("eval.full_neighbourhood: layer-wise inference gives the accuracy Python computes over every neighbour",
          "[graph][slow]") {
  TempDir dir;
  std::string graph = make_graph(dir);
  // Fanouts of 2 of the 5 neighbours: sampled evaluation would differ from Python's full one.
  for (std::string aggregation : {"mean", "max"}) {
    INFO(aggregation);
    std::string out = dir.file("run_" + aggregation);
    auto r = run_shell(graph_run(2, graph, out,
                                 "--set train.epochs=4 --set train.batch_size=32 --set optim.lr=0.02 "
                                 "--set sampler.fanouts=[2,2] --set sampler.split=chunk --set eval.full_neighbourhood=true "
                                 "--set model.aggregation=" + aggregation),
                       std::chrono::seconds(300));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    auto accuracy = ddp::read_run(out).last("eval_accuracy");
    REQUIRE(accuracy);
    auto python = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/eval_graphsage.py",
                               out + "/model.pt", graph, "val", aggregation},
                              std::chrono::seconds(120));
    INFO(python.out << python.err);
    REQUIRE(python.exit_code == 0);
    CHECK(std::abs(std::stod(python.out) - *accuracy) <= 0.011);  // at most one of 100 nodes on a rounding edge
  }
}

TEST_CASE("the political-blogs graph from Debian's graph-tool package trains, and Python agrees", "[graph][slow]") {
  // scripts/setup.sh downloads the package (not installed: only its data is used).
  std::string deb;
  if (std::filesystem::is_directory("/var/cache/ddprun"))
    for (const auto& entry : std::filesystem::directory_iterator("/var/cache/ddprun"))
      if (entry.path().filename().string().rfind("python3-graph-tool_", 0) == 0) deb = entry.path();
  if (deb.empty()) {
    WARN("skipped: no python3-graph-tool .deb in /var/cache/ddprun (scripts/setup.sh downloads it)");
    return;
  }
  TempDir dir;
  std::string graph = dir.file("polblogs"), out = dir.file("run");
  auto made = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_polblogs.py", graph, "--deb", deb},
                          std::chrono::seconds(120));
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  CHECK_THAT(made.out, Contains("1222 nodes (largest component of 1490), 33428 edges"));
  auto r = run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " + std::string(DDP_SOURCE_DIR) +
                         "/configs/graphsage_polblogs.yaml --set data.path=" + graph + " --set run.output_dir=" + out +
                         " --set data.eval_split=test --set eval.full_neighbourhood=true",
                     std::chrono::seconds(300));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto accuracy = ddp::read_run(out).last("eval_accuracy");
  REQUIRE(accuracy);
  CHECK(*accuracy > 0.9);
  auto python = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/support/eval_graphsage.py",
                             out + "/model.pt", graph, "test"},
                            std::chrono::seconds(120));
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);
  CHECK(std::abs(std::stod(python.out) - *accuracy) <= 0.005);  // one of 244 nodes on a rounding edge at most
}

TEST_CASE("a generated graph in PyG's Reddit files trains through the node's graph cache, as the Python reference does",
          "[graph][slow][python]") {
  TempDir dir;
  std::string graph = dir.file("reddit"), cache = dir.file("cache"), out = dir.file("run");
  auto made = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_reddit_like.py", graph,
                           "--nodes", "3000", "--edges", "60000", "--features", "16", "--classes", "5", "--compressed"},
                          std::chrono::seconds(120));
  INFO(made.out << made.err);
  if (made.exit_code != 0 && made.err.find("No module named 'scipy'") != std::string::npos) {
    WARN("skipped: /usr/bin/python3 has no scipy (Debian's python3-scipy; scripts/setup.sh installs it)");
    return;
  }
  REQUIRE(made.exit_code == 0);
  CHECK_THAT(made.out, Contains("3,000 nodes, 60,000 directed edges"));
  auto r = run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " + std::string(DDP_SOURCE_DIR) +
                         "/configs/graphsage_reddit.yaml --set data.path=" + graph + " --set data.cache_dir=" + cache +
                         " --set run.output_dir=" + out + " --set model.num_classes=5 " +
                         "--set train.batch_size=128 --set model.hidden=[32] --set train.log_every=5 --set optim.lr=0.01 --set train.epochs=6",
                     std::chrono::seconds(300));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // One graph file for both ranks, with its lock, its record of verification and its in-use lock (node_cache.h).
  CHECK(std::distance(std::filesystem::directory_iterator(cache), {}) == 4);
  auto run = ddp::read_run(out);
  REQUIRE(run.last("sampled_edges_per_s"));
  CHECK(*run.last("eval_accuracy") > 0.6);  // the largest of the 5 classes is about a third of the nodes
  // The reference reads the same files and trains the same method.
  auto python = run_shell("RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                              " /usr/bin/python3 " + std::string(DDP_SOURCE_DIR) + "/scripts/bench_graphsage_reference.py" +
                              " --data " + graph + " --batch-size 128 --hidden 32 --steps 3 --warmup 1 --split chunk",
                          std::chrono::seconds(120));
  INFO(python.out << python.err);
  REQUIRE(python.exit_code == 0);
  CHECK_THAT(python.out, Contains("bench-result {\"world\": 1, \"seed_nodes_per_s\": "));
}

}  // namespace DDP_TEST_FILE
