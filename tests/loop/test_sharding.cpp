// dist.shard: optimizer (ZeRO-1) by real ddprun processes: the weights equal the replicated run's
// on the MLP and the GPT at world 2 and 4, each rank holds its share of the optimizer state, and
// checkpoints stay whole: a sharded run resumes replicated and back, and after a SIGKILL exactly.
#include <torch/torch.h>
#undef CHECK  // glog's CHECK (via LibTorch) must not shadow Catch's
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>

#include "support/metric_values.h"
#include "support/subprocess.h"
#include "support/weights.h"

using namespace ddp::test;
using Catch::Contains;

namespace {

CommandResult ddprun(int nproc, const std::string& config, const std::vector<std::string>& sets,
                     const std::string& options = "") {
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " +
                        std::to_string(nproc) + " " + options + " " + config;
  for (const auto& s : sets) command += " --set '" + s + "'";
  return run_shell(command, std::chrono::seconds(300));
}

std::string config_path(const std::string& name) { return std::string(DDP_SOURCE_DIR) + "/configs/" + name; }

// The MLP on synthetic data under AdamW with weight decay and clipping.
std::vector<std::string> mlp_sets(const TempDir& dir, const std::string& name, int batch) {
  return {"run.output_dir=" + dir.file(name), "train.max_steps=30", "train.batch_size=" + std::to_string(batch),
          "optim.name=adamw", "optim.lr=0.003", "optim.weight_decay=0.1", "train.clip_grad_norm=0.5",
          "data.eval_split=none", "checkpoint.every_epochs=0", "model.hidden=[64,32]", "train.epochs=5"};
}

double largest_difference(const std::string& a, const std::string& b) {
  auto x = load_weights(a), y = load_weights(b);
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (const auto& [name, tensor] : x) worst = std::max(worst, (tensor - y.at(name)).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("dist.shard optimizer at world 2 and 4 trains the MLP to the replicated run's weights within 1e-6",
          "[sharding]") {
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  for (int world : {2, 4}) {
    int batch = 64 / world;
    std::string tag = std::to_string(world);
    auto replicated = ddprun(world, config, mlp_sets(dir, "replicated" + tag, batch));
    INFO(replicated.out << replicated.err);
    REQUIRE(replicated.exit_code == 0);
    auto sets = mlp_sets(dir, "sharded" + tag, batch);
    sets.push_back("dist.shard=optimizer");
    auto sharded = ddprun(world, config, sets);
    INFO(sharded.out << sharded.err);
    REQUIRE(sharded.exit_code == 0);
    CHECK(largest_difference(dir.file("replicated" + tag + "/model.pt"), dir.file("sharded" + tag + "/model.pt")) <
          1e-6);
    // Whole tensors are shared out, and one weight (784 × 64) is 95% of this MLP: its owner keeps
    // nearly all the state, the others little (the GPT below splits evenly).
    double whole = metric_value(dir.file("replicated" + tag + "/metrics.jsonl"), "optimizer_state_mib_max");
    double share = metric_value(dir.file("sharded" + tag + "/metrics.jsonl"), "optimizer_state_mib_max");
    CHECK(whole > 0);
    CHECK(share < whole);
    CHECK_THAT(sharded.out, Contains("memory per rank (largest): parameters"));
  }
}

TEST_CASE("a sharded run's checkpoint resumes replicated, and a replicated one sharded, to the same weights",
          "[sharding]") {
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  auto sets = [&](const std::string& name, int steps) {
    auto s = mlp_sets(dir, name, 32);
    s.push_back("train.max_steps=" + std::to_string(steps));
    s.push_back("checkpoint.every_steps=10");
    return s;
  };
  auto straight = ddprun(2, config, sets("straight", 30));
  INFO(straight.out << straight.err);
  REQUIRE(straight.exit_code == 0);
  for (const auto& [first, then] : {std::pair<std::string, std::string>{"optimizer", "none"}, {"none", "optimizer"}}) {
    std::string name = "from_" + first;
    auto a = sets(name, 20);
    a.push_back("dist.shard=" + first);
    auto part = ddprun(2, config, a);
    INFO(part.out << part.err);
    REQUIRE(part.exit_code == 0);
    auto b = sets(name, 30);
    b.push_back("dist.shard=" + then);
    auto rest = ddprun(2, config, b);
    INFO(rest.out << rest.err);
    REQUIRE(rest.exit_code == 0);
    CHECK_THAT(rest.out, Contains("resumed from"));
    CHECK(largest_difference(dir.file("straight/model.pt"), dir.file(name + "/model.pt")) < 1e-6);
  }
}

TEST_CASE("a GPT with dist.shard optimizer at world 2 matches the replicated run, and resumes bit-identically "
          "after a SIGKILL",
          "[sharding][gpt][faults][slow]") {
  TempDir dir;
  // The KJV shards are not needed: the GPL's bytes, written as a raw uint16 file.
  std::string text = read_file("/usr/share/common-licenses/GPL-3");
  std::string raw;
  for (unsigned char c : text) raw += std::string{static_cast<char>(c), '\0'};
  write_file(dir.file("tokens.bin"), raw);
  auto sets = [&](const std::string& name, const std::string& shard) {
    return std::vector<std::string>{
        "run.output_dir=" + dir.file(name), "data.path=" + dir.file("tokens.bin"), "data.token_dtype=uint16",
        "data.eval_split=none", "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=32",
        "train.batch_size=8", "train.max_steps=60", "checkpoint.every_steps=20", "checkpoint.keep_last=10",
        "eval.every_steps=0", "dist.shard=" + shard, "train.epochs=5"};
  };
  std::string config = config_path("gpt_kjv.yaml");
  auto replicated = ddprun(2, config, sets("replicated", "none"));
  INFO(replicated.out << replicated.err);
  REQUIRE(replicated.exit_code == 0);
  auto sharded = ddprun(2, config, sets("sharded", "optimizer"));
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  CHECK(largest_difference(dir.file("replicated/model.pt"), dir.file("sharded/model.pt")) < 1e-6);
  double whole = metric_value(dir.file("replicated/metrics.jsonl"), "optimizer_state_mib_max");
  double share = metric_value(dir.file("sharded/metrics.jsonl"), "optimizer_state_mib_max");
  CHECK(share <= 0.6 * whole);  // its tensors balance: about half each

  std::string out = dir.file("killed");
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 --max-restarts 1 " +
                        config;
  for (const auto& s : sets("killed", "optimizer")) command += " --set '" + s + "'";
  auto killed = run_shell(command + " & L=$!; i=0; while [ ! -e " + out +
                              "/checkpoints/step_0000000020.json ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); "
                              "done; pkill -KILL -n -f '[d]dp-train.*" + out + "'; wait $L; echo status=$?",
                          std::chrono::seconds(300));
  INFO(killed.out << killed.err);
  CHECK(count_lines(killed.out, "status=0") == 1);
  CHECK_THAT(killed.err, Contains("signal 9 (SIGKILL)"));
  CHECK_THAT(killed.out, Contains("resumed from"));
  std::string x = read_file(dir.file("sharded/model.pt")), y = read_file(out + "/model.pt");
  CHECK((!x.empty() && x == y));
}
