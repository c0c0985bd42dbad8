// dist.shard optimizer, gradients and parameters (ZeRO-1/2/3) by real ddprun processes: the weights
// equal the replicated run's on the MLP and the GPT at world 2 and 4 (and under HSDP), each rank
// holds its share of the state; checkpoints are written shard by shard, and a sharded run resumes
// replicated and back, at another world size, and after a SIGKILL exactly.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "support/metric_values.h"
#include "support/subprocess.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

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

// Two launchers on this machine (--nnodes 2), node 1's in the background with its output in
// DIR/node1.log; `node0` and `node1` are each one's own options. The output ends "statuses=A,B".
CommandResult run_two_nodes(const TempDir& dir, const std::string& config, const std::vector<std::string>& sets,
                            const std::string& node0, const std::string& node1) {
  std::string launch = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --nnodes 2 --master-addr 127.0.0.1 --master-port " +
                       std::to_string(free_port()) + " --rdzv-timeout 30 " + config;
  for (const auto& s : sets) launch += " --set '" + s + "'";
  return run_shell(launch + " " + node1 + " --node-rank 1 > " + dir.file("node1.log") + " 2>&1 & B=$!; " + launch +
                       " " + node0 + " --node-rank 0; A=$?; wait $B; echo statuses=$A,$?",
                   std::chrono::seconds(240));
}

}  // namespace

TEST_CASE("every dist.shard at world 2 and 4 (parameters also with dist.shard_overlap) trains the MLP to the "
          "replicated run's weights within 1e-6, each rank holding its share",
          "[sharding]") {
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  for (int world : {2, 4}) {
    int batch = 64 / world;
    std::string tag = std::to_string(world);
    auto replicated = ddprun(world, config, mlp_sets(dir, "none" + tag, batch));
    INFO(replicated.out << replicated.err);
    REQUIRE(replicated.exit_code == 0);
    std::string metrics = dir.file("none" + tag + "/metrics.jsonl");
    const double parameters = metric_value(metrics, "parameter_mib_max");
    const double gradients = metric_value(metrics, "gradient_mib_max");
    const double state = metric_value(metrics, "optimizer_state_mib_max");
    // "overlapped": parameters with dist.shard_overlap, the backward's communication during its compute.
    for (std::string name : {"optimizer", "gradients", "parameters", "overlapped"}) {
      const std::string shard = name == "overlapped" ? "parameters" : name;
      auto sets = mlp_sets(dir, name + tag, batch);
      sets.push_back("dist.shard=" + shard);
      if (name == "overlapped") sets.push_back("dist.shard_overlap=true");
      auto sharded = ddprun(world, config, sets);
      INFO(name << " at world " << world << "\n" << sharded.out << sharded.err);
      REQUIRE(sharded.exit_code == 0);
      CHECK(largest_difference(dir.file("none" + tag + "/model.pt"), dir.file(name + tag + "/model.pt")) < 1e-6);
      CHECK_THAT(sharded.out, Contains("memory per rank (largest): parameters"));
      std::string mine = dir.file(name + tag + "/metrics.jsonl");
      // Whole tensors are dealt out with optimizer, and one weight (784 × 64) is 95% of this MLP:
      // its owner keeps nearly all the state. The flat shards of the others split every tensor.
      CHECK(metric_value(mine, "optimizer_state_mib_max") < (shard == "optimizer" ? state : 1.1 * state / world));
      if (shard != "optimizer") CHECK(metric_value(mine, "gradient_mib_max") < 1.1 * gradients / world);
      if (shard == "parameters") CHECK(metric_value(mine, "parameter_mib_max") < 1.1 * parameters / world);
      if (shard == "gradients") CHECK(metric_value(mine, "parameter_mib_max") >= parameters);
    }
  }
}

// The resume matrix (test_resume_matrix.cpp) covers replicated, ZeRO-1 and ZeRO-3; here ZeRO-2.
TEST_CASE("a ZeRO-2 run's checkpoint resumes replicated, and a ZeRO-3 one under ZeRO-2, to the same weights",
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
  for (const auto& [first, then] :
       {std::pair<std::string, std::string>{"parameters", "gradients"}, {"gradients", "none"}}) {
    std::string name = first + "_then_" + then;
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

TEST_CASE("a sharded checkpoint is a file per shard and a manifest of their pieces, and a damaged shard sends every "
          "rank to the previous checkpoint, or fails naming the rank that read it",
          "[sharding][checkpoint]") {
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  auto sets = [&](const std::string& name, int steps, const std::vector<std::string>& more = {}) {
    auto s = mlp_sets(dir, name, 32);
    s.insert(s.end(), {"train.max_steps=" + std::to_string(steps), "checkpoint.every_steps=10", "dist.shard=gradients"});
    s.insert(s.end(), more.begin(), more.end());
    return s;
  };
  auto first = ddprun(2, config, sets("run", 30));
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  namespace fs = std::filesystem;
  std::string checkpoints = dir.file("run/checkpoints/");
  for (const char* name : {"step_0000000030.json", "step_0000000030.common.pt", "step_0000000030.shard-0-of-2.pt",
                           "step_0000000030.shard-1-of-2.pt", "step_0000000020.shard-1-of-2.pt"})
    CHECK(fs::exists(checkpoints + name));
  CHECK_FALSE(fs::exists(checkpoints + "step_0000000030.pt"));
  // keep_last 2: every file of step 10 is gone.
  for (const auto& entry : fs::directory_iterator(checkpoints))
    CHECK(entry.path().filename().string().rfind("step_0000000010", 0) == std::string::npos);
  std::string manifest = read_file(checkpoints + "step_0000000030.json");
  CHECK_THAT(manifest, Contains("mesh: \"pipeline 1 × data_replicate 1 × data_shard 2, dist.shard gradients\"") &&
                           Contains("{name: layers.0.weight, shape: [64, 784]}") && Contains("pieces: [[0, [0, 0], ["));

  // One byte of rank 1's shard of step 30 flipped: the CRC-32 catches it where it is read.
  std::string shard = read_file(checkpoints + "step_0000000030.shard-1-of-2.pt");
  shard[shard.size() / 2] ^= 0x20;
  write_file(checkpoints + "step_0000000030.shard-1-of-2.pt", shard);
  fs::copy(dir.file("run"), dir.file("pinned"), fs::copy_options::recursive);
  auto pinned = ddprun(2, config,
                       sets("pinned", 40, {"checkpoint.resume=" + dir.file("pinned/checkpoints/step_0000000030.json")}));
  INFO(pinned.out << pinned.err);
  CHECK(pinned.exit_code != 0);
  CHECK_THAT(pinned.err, Contains("checkpoint.resume: rank 1: " + dir.file("pinned/checkpoints/") +
                                  "step_0000000030.shard-1-of-2.pt is corrupt: CRC-32 does not match its manifest"));
  auto rest = ddprun(2, config, sets("run", 40));
  INFO(rest.out << rest.err);
  REQUIRE(rest.exit_code == 0);
  CHECK_THAT(rest.out + rest.err, Contains("skipping checkpoint " + checkpoints + "step_0000000030.json: rank 1: "));
  CHECK_THAT(rest.out, Contains("resumed from " + checkpoints + "step_0000000020.json at step 20") &&
                           Contains("2 shards of pipeline 1 × data_replicate 1 × data_shard 2"));

  // Another model: one message naming the difference, before any shard is read: the run's config
  // refuses it (config.yaml, and the checkpoint's own record of it without that file).
  const std::string newest = "checkpoint.resume=" + checkpoints + "step_0000000040.json";
  auto other = ddprun(2, config, sets("run", 50, {"model.hidden=[32]", newest}));
  INFO(other.out << other.err);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("holds a run of another config (model.hidden [64, 32] → [32])"));
  fs::remove(dir.file("run/config.yaml"));
  auto recorded = ddprun(2, config, sets("run", 50, {"model.hidden=[32]", newest}));
  INFO(recorded.out << recorded.err);
  CHECK(recorded.exit_code == 2);
  CHECK_THAT(recorded.err, Contains(checkpoints + "step_0000000040.json was written by a run of another config "
                                    "(model.hidden [64, 32] → [32]), which it does not fit"));
  // A checkpoint that records no config (an older ddprun's): the shapes and the optimizer's name
  // themselves refuse it.
  std::string manifest_40 = read_file(checkpoints + "step_0000000040.json");
  manifest_40 = std::regex_replace(manifest_40, std::regex("\n(config|data): [^\n]*"), "");
  REQUIRE_THAT(manifest_40, !Contains("config:"));
  write_file(checkpoints + "step_0000000040.json", manifest_40);
  auto shapes = ddprun(2, config, sets("run", 50, {"model.hidden=[32]", newest}));
  INFO(shapes.out << shapes.err);
  CHECK(shapes.exit_code != 0);
  CHECK_THAT(shapes.err, Contains("does not fit this model (was it written with another model config?): "
                                  "layers.0.weight has shape [64, 784] in the checkpoint, [32, 784] in the model;"));
  // Another optimizer: its state would be taken for this one's.
  auto sgd = ddprun(2, config, sets("run", 50, {"optim.name=sgd", newest}));
  INFO(sgd.out << sgd.err);
  CHECK(sgd.exit_code != 0);
  CHECK_THAT(sgd.err, Contains("holds the state of optim.name adamw, and this run's is sgd"));

  // checkpoint.format whole: one file from rank 0, as without sharding.
  auto whole = ddprun(2, config, sets("whole", 10, {"checkpoint.format=whole"}));
  INFO(whole.out << whole.err);
  REQUIRE(whole.exit_code == 0);
  CHECK(fs::exists(dir.file("whole/checkpoints/step_0000000010.pt")));
  CHECK_FALSE(fs::exists(dir.file("whole/checkpoints/step_0000000010.shard-0-of-2.pt")));
}

TEST_CASE("a sharded manifest with an edited piece, or cut short, sends every rank to the previous checkpoint with "
          "a warning",
          "[sharding][checkpoint]") {
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  auto sets = [&](int steps) {
    auto s = mlp_sets(dir, "run", 32);
    s.insert(s.end(), {"train.max_steps=" + std::to_string(steps), "checkpoint.every_steps=10", "checkpoint.keep_last=4",
                       "dist.shard=gradients"});
    return s;
  };
  REQUIRE(ddprun(2, config, sets(40)).exit_code == 0);
  const std::string checkpoints = dir.file("run/checkpoints/");
  // Step 40's first piece starts a row later, one digit changed: as many elements as before, row 0
  // in no piece, and a row in two. Counted, it passed, and row 0 was resumed from uninitialised memory.
  std::string shifted = read_file(checkpoints + "step_0000000040.json");
  const auto first_piece = shifted.find("pieces: [[0, [0, 0], [");
  REQUIRE(first_piece != std::string::npos);
  shifted.replace(first_piece, std::string("pieces: [[0, [0, 0]").size(), "pieces: [[0, [1, 0]");
  write_file(checkpoints + "step_0000000040.json", shifted);
  // Step 30's first piece now holds a row fewer: that row of layers.0.weight is in no piece.
  std::string edited = read_file(checkpoints + "step_0000000030.json");
  std::smatch first;
  REQUIRE(std::regex_search(edited, first, std::regex(R"(pieces: \[\[0, \[0, 0\], \[(\d+), )")));
  edited.replace(static_cast<std::size_t>(first.position(1)), static_cast<std::size_t>(first.length(1)),
                 std::to_string(std::stoi(first[1]) - 1));
  write_file(checkpoints + "step_0000000030.json", edited);
  // Step 20's manifest loses its last shard, as a write cut short at a line would.
  std::string whole = read_file(checkpoints + "step_0000000020.json");
  auto last_shard = whole.find("\n  - file: step_0000000020.shard-1-of-2.pt");
  REQUIRE(last_shard != std::string::npos);
  write_file(checkpoints + "step_0000000020.json", whole.substr(0, last_shard + 1));
  auto r = ddprun(2, config, sets(50));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err, Contains("skipping checkpoint " + checkpoints + "step_0000000040.json: ") &&
                                Contains(" of layers.0.weight overlap (the manifest was cut short or edited)"));
  CHECK_THAT(r.out + r.err, Contains("skipping checkpoint " + checkpoints + "step_0000000030.json: rank 0: " + checkpoints +
                                     "step_0000000030.json: its pieces hold ") &&
                                Contains("of layers.0.weight (the manifest was cut short or edited)"));
  CHECK_THAT(r.out + r.err, Contains("skipping checkpoint " + checkpoints + "step_0000000020.json: rank 1: "));
  CHECK_THAT(r.out, Contains("resumed from " + checkpoints + "step_0000000010.json at step 10"));
}

TEST_CASE("two launchers of 2 ranks each (--nnodes 2) shard within each node and replicate across them by "
          "default, to the replicated run's weights",
          "[sharding][multinode]") {
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  auto replicated = ddprun(4, config, mlp_sets(dir, "none", 16));
  INFO(replicated.out << replicated.err);
  REQUIRE(replicated.exit_code == 0);
  auto sets = mlp_sets(dir, "hsdp", 16);
  sets.push_back("dist.shard=parameters");
  auto r = run_two_nodes(dir, config, sets, "--nproc-per-node 2", "--nproc-per-node 2");
  INFO(r.out << r.err << read_file(dir.file("node1.log")));
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  CHECK_THAT(r.out, Contains("data_replicate 2 × data_shard 2"));
  CHECK(largest_difference(dir.file("none/model.pt"), dir.file("hsdp/model.pt")) < 1e-6);
}

TEST_CASE("nodes of 2 and 1 ranks agree on the mesh dist.shard lays out, and train to the replicated run's weights",
          "[sharding][multinode]") {
  // Each node read its own count of ranks for the default data_shard: node 0 laid out one group of
  // 3, node 1 groups of 1, and the ranks called different collectives (Gloo aborted, or a hang).
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  auto replicated = ddprun(3, config, mlp_sets(dir, "none", 16));
  INFO(replicated.out << replicated.err);
  REQUIRE(replicated.exit_code == 0);
  auto sets = mlp_sets(dir, "mixed", 16);
  sets.insert(sets.end(), {"dist.shard=gradients", "dist.timeout_s=30"});
  auto r = run_two_nodes(dir, config, sets, "--nproc-per-node 2", "--nproc-per-node 1");
  INFO(r.out << r.err << read_file(dir.file("node1.log")));
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  CHECK(largest_difference(dir.file("none/model.pt"), dir.file("mixed/model.pt")) < 1e-6);
}

TEST_CASE("checkpoint.keep_last prunes the shards another node writes to its own run.output_dir", "[sharding][multinode]") {
  TempDir dir;
  std::string config = config_path("synthetic_mlp.yaml");
  auto sets = mlp_sets(dir, "node0", 32);
  sets.insert(sets.end(), {"dist.shard=gradients", "dist.data_shard=2", "train.max_steps=20",
                           "checkpoint.every_steps=5", "checkpoint.keep_last=2"});
  // What a save that failed (a full disk) left in node 1's directory goes with the pruned steps.
  std::filesystem::create_directories(dir.file("node1/checkpoints"));
  write_file(dir.file("node1/checkpoints/step_0000000005.shard-1-of-2.pt.tmp.XyZ123"), "cut short");
  write_file(dir.file("node1/checkpoints/step_0000000003.shard-1-of-2.pt"), "no manifest commits it");
  // Node 1's output directory is its own (node-local storage): rank 1 writes its shards there.
  auto r = run_two_nodes(dir, config, sets, "--nproc-per-node 1",
                         "--nproc-per-node 1 --set run.output_dir=" + dir.file("node1"));
  INFO(r.out << r.err << read_file(dir.file("node1.log")));
  REQUIRE(count_lines(r.out, "statuses=0,0") == 1);
  auto names = [&](const std::string& node) {
    std::set<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir.file(node + "/checkpoints")))
      found.insert(entry.path().filename().string());
    return found;
  };
  CHECK(names("node1") == std::set<std::string>{"step_0000000015.shard-1-of-2.pt", "step_0000000020.shard-1-of-2.pt"});
  CHECK(names("node0") == std::set<std::string>{"step_0000000015.common.pt", "step_0000000015.json",
                                                "step_0000000015.shard-0-of-2.pt", "step_0000000020.common.pt",
                                                "step_0000000020.json", "step_0000000020.shard-0-of-2.pt"});
}

namespace {

// A small GPT on the GPL's bytes, written as a raw uint16 file (the KJV shards are not needed):
// AdamW with decay on the matrices and clipping, as configs/gpt_kjv.yaml.
struct GptRuns {
  TempDir dir;
  GptRuns() {
    std::string raw;
    for (unsigned char c : read_file("/usr/share/common-licenses/GPL-3")) raw += std::string{static_cast<char>(c), '\0'};
    write_file(dir.file("tokens.bin"), raw);
  }
  std::vector<std::string> sets(const std::string& name, const std::string& shard, int batch, int steps) const {
    return {"run.output_dir=" + dir.file(name), "data.path=" + dir.file("tokens.bin"), "data.token_dtype=uint16",
            "data.eval_split=none", "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=32",
            "train.batch_size=" + std::to_string(batch), "train.max_steps=" + std::to_string(steps),
            "checkpoint.every_steps=10", "checkpoint.keep_last=10", "eval.every_steps=0", "dist.shard=" + shard,
            "train.epochs=5"};
  }
  CommandResult run(int world, const std::vector<std::string>& sets, const std::string& options = "") const {
    return ddprun(world, config_path("gpt_kjv.yaml"), sets, options);
  }
  std::string model(const std::string& name) const { return dir.file(name + "/model.pt"); }
};

}  // namespace

TEST_CASE("a GPT under every dist.shard at world 2 and 4, and under HSDP, matches the replicated run within 1e-6",
          "[sharding][gpt][slow]") {
  GptRuns gpt;
  for (int world : {2, 4}) {
    std::string tag = std::to_string(world);
    auto replicated = gpt.run(world, gpt.sets("none" + tag, "none", 16 / world, 30));
    INFO(replicated.out << replicated.err);
    REQUIRE(replicated.exit_code == 0);
    for (std::string shard : {"optimizer", "gradients", "parameters"}) {
      auto sharded = gpt.run(world, gpt.sets(shard + tag, shard, 16 / world, 30));
      INFO(shard << " at world " << world << "\n" << sharded.out << sharded.err);
      REQUIRE(sharded.exit_code == 0);
      CHECK(largest_difference(gpt.model("none" + tag), gpt.model(shard + tag)) < 1e-6);
    }
  }
  // Shards of 2 ranks, replicated twice: the shards' collectives go through Gloo (the group is not
  // the node), and the gradient shards are then summed across the replicas.
  for (std::string shard : {"gradients", "parameters"}) {
    auto sets = gpt.sets("hsdp_" + shard, shard, 4, 30);
    sets.push_back("dist.data_shard=2");
    auto hsdp = gpt.run(4, sets);
    INFO(hsdp.out << hsdp.err);
    REQUIRE(hsdp.exit_code == 0);
    CHECK_THAT(hsdp.out, Contains("data_replicate 2 × data_shard 2"));
    // One replica writes the checkpoints' shards: two of them.
    std::string checkpoints = gpt.dir.file("hsdp_" + shard + "/checkpoints/");
    CHECK(std::filesystem::exists(checkpoints + "step_0000000030.shard-1-of-2.pt"));
    CHECK_FALSE(std::filesystem::exists(checkpoints + "step_0000000030.shard-2-of-4.pt"));
    CHECK(largest_difference(gpt.model("none4"), gpt.model("hsdp_" + shard)) < 1e-6);
  }
  // Its blocks are the units: the largest gathered is one block's, a fraction of the model.
  double unit = metric_value(gpt.dir.file("parameters4/metrics.jsonl"), "gathered_unit_mib");
  double whole = metric_value(gpt.dir.file("none4/metrics.jsonl"), "parameter_mib_max");
  CHECK((unit > 0 && unit < 0.5 * whole));
}

TEST_CASE("a GPT sharded at world 4 and stopped resumes at world 2 sharded and at world 1 replicated to the "
          "uninterrupted run's weights",
          "[sharding][gpt][checkpoint][slow]") {
  GptRuns gpt;
  auto straight = gpt.run(4, gpt.sets("straight", "parameters", 4, 30));
  INFO(straight.out << straight.err);
  REQUIRE(straight.exit_code == 0);
  auto first = gpt.run(4, gpt.sets("part", "parameters", 4, 20));
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  std::filesystem::copy(gpt.dir.file("part"), gpt.dir.file("at2"), std::filesystem::copy_options::recursive);
  std::filesystem::copy(gpt.dir.file("part"), gpt.dir.file("at1"), std::filesystem::copy_options::recursive);
  // The same 16 samples a step: 2 ranks of 8, 1 of 16 (Note [Resume at another world size]).
  auto at2 = gpt.run(2, gpt.sets("at2", "parameters", 8, 30));
  INFO(at2.out << at2.err);
  REQUIRE(at2.exit_code == 0);
  CHECK_THAT(at2.out,
             Contains("at step 20") && Contains("written by 4 replicas of batch 4: the same 16 samples per step"));
  CHECK(largest_difference(gpt.model("straight"), gpt.model("at2")) < 1e-5);
  auto at1 = gpt.run(1, gpt.sets("at1", "none", 16, 30));
  INFO(at1.out << at1.err);
  REQUIRE(at1.exit_code == 0);
  CHECK_THAT(at1.out, Contains("at step 20"));
  CHECK(largest_difference(gpt.model("straight"), gpt.model("at1")) < 1e-5);
}

TEST_CASE("a GPT with dist.shard parameters resumes bit-identically after a SIGKILL", "[sharding][gpt][faults][slow]") {
  GptRuns gpt;
  auto sharded = gpt.run(2, gpt.sets("sharded", "parameters", 8, 60));
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  std::string out = gpt.dir.file("killed");
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 --max-restarts 1 " +
                        config_path("gpt_kjv.yaml");
  for (const auto& s : gpt.sets("killed", "parameters", 8, 60)) command += " --set '" + s + "'";
  auto killed = run_shell(command + " & L=$!; " + until_true("[ -e " + out + "/checkpoints/step_0000000020.json ]") +
                              "pkill -KILL -n -f '[d]dp-train.*" + out + "'; wait $L; echo status=$?",
                          std::chrono::seconds(300));
  INFO(killed.out << killed.err);
  CHECK(count_lines(killed.out, "status=0") == 1);
  CHECK_THAT(killed.err, Contains("signal 9 (SIGKILL)"));
  CHECK_THAT(killed.out, Contains("resumed from"));
  std::string x = read_file(gpt.model("sharded")), y = read_file(out + "/model.pt");
  CHECK((!x.empty() && x == y));
}

TEST_CASE("the ConvNet trains under dist.shard parameters block by block to the replicated run's weights, and "
          "its sharded checkpoint resumes replicated in the channels-last layout",
          "[sharding][checkpoint]") {
  TempDir dir;
  // Flat shards hold the weights in logical order, so the sharded run computes its convolutions
  // in NCHW: the replicated reference does too. (No batch norm: it cancels the conv biases, whose
  // gradients are then rounding noise that Adam scales up to full steps in either run.)
  auto sets = [&](const std::string& name, const std::string& shard, bool channels_last) {
    auto s = mlp_sets(dir, name, 16);
    s.insert(s.end(), {"model.name=convnet", "model.batchnorm=false", "train.max_steps=20", "dist.shard=" + shard,
                       "model.channels_last=" + std::string(channels_last ? "true" : "false"),
                       "checkpoint.every_steps=10"});
    return s;
  };
  auto replicated = ddprun(2, config_path("synthetic_mlp.yaml"), sets("none", "none", false));
  INFO(replicated.out << replicated.err);
  REQUIRE(replicated.exit_code == 0);
  auto sharded = ddprun(2, config_path("synthetic_mlp.yaml"), sets("parameters", "parameters", false));
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  // Within 1e-6 on the machines this was written on; 2.6e-5 on one with AVX-512 (avx512f, avx512_bf16),
  // where the old code differed alike: oneDNN's convolution kernels there round otherwise for the
  // flat shard's views (probably their alignment) than for whole tensors, and AdamW's normalised
  // steps carry that rounding over 20 steps. The MLP's bound (above) stays 1e-6.
  CHECK(largest_difference(dir.file("none/model.pt"), dir.file("parameters/model.pt")) < 1e-4);
  // The largest unit is the classifier (7·7·32 × 10), not the whole model.
  CHECK(metric_value(dir.file("parameters/metrics.jsonl"), "gathered_unit_mib") <
        0.8 * metric_value(dir.file("none/metrics.jsonl"), "parameter_mib_max"));
  // Step 10's shards into channels-last weights, whose elements lie in another order in memory.
  std::filesystem::create_directories(dir.file("resumed/checkpoints"));
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("parameters/checkpoints")))
    if (entry.path().filename().string().rfind("step_0000000010", 0) == 0)
      std::filesystem::copy_file(entry.path(), dir.file("resumed/checkpoints/") + entry.path().filename().string());
  auto resumed = ddprun(2, config_path("synthetic_mlp.yaml"), sets("resumed", "none", true));
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("at step 10"));
  CHECK(largest_difference(dir.file("none/model.pt"), dir.file("resumed/model.pt")) < 1e-4);
}

TEST_CASE("a 37M-parameter MLP under dist.shard parameters at world 4 peaks at most 0.62x the replicated run's "
          "RSS on every rank, trains to its weights, and built from a file holds no more than from the seed",
          "[sharding][memory][slow]") {
  // 784·4096 + 2·4096² + 4096·10 ≈ 36.8M parameters, AdamW: 562 MiB of state a rank replicated, 140
  // sharded. What a sharded backward holds besides is one unit gathered and its gradient (Note
  // [Gradient memory]); ~190 MiB of libraries count in both runs.
  TempDir dir;
  auto sets = [&](const std::string& name, const std::string& shard) {
    return std::vector<std::string>{"run.output_dir=" + dir.file(name), "train.max_steps=3", "train.batch_size=16",
                                    "optim.name=adamw", "optim.lr=0.001", "data.eval_split=none",
                                    "checkpoint.every_epochs=0", "model.hidden=[4096,4096,4096]",
                                    "dist.shard=" + shard};
  };
  auto replicated = ddprun(4, config_path("synthetic_mlp.yaml"), sets("replicated", "none"));
  INFO(replicated.out << replicated.err);
  REQUIRE(replicated.exit_code == 0);
  auto sharded = ddprun(4, config_path("synthetic_mlp.yaml"), sets("sharded", "parameters"));
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  const double whole = metric_value(dir.file("replicated/metrics.jsonl"), "peak_rss_mib_max");
  const double mine = metric_value(dir.file("sharded/metrics.jsonl"), "peak_rss_mib_max");
  INFO("peak RSS per rank, the largest: replicated " << whole << " MiB, dist.shard parameters " << mine << " MiB ("
                                                     << mine / whole << "x)");
  REQUIRE(whole > 0);
  CHECK(mine <= 0.62 * whole);
  CHECK(largest_difference(dir.file("replicated/model.pt"), dir.file("sharded/model.pt")) < 1e-5);

  // From a file each rank reads only its share (Note [Deferred initialisation]): with the model
  // built and placed, no more than from the seed, give or take noise. Reading it whole on every
  // rank, as before, took the model twice more (a whole build, then the file's tensors).
  auto more = sets("from_file", "parameters");
  more.push_back("model.init_from=" + dir.file("replicated/model.safetensors"));
  auto from_file = ddprun(4, config_path("synthetic_mlp.yaml"), more);
  INFO(from_file.out << from_file.err);
  REQUIRE(from_file.exit_code == 0);
  const double model_mib = 36.8e6 * 4 / (1 << 20);
  const double seeded = metric_value(dir.file("sharded/metrics.jsonl"), "setup_peak_rss_mib_max");
  const double read = metric_value(dir.file("from_file/metrics.jsonl"), "setup_peak_rss_mib_max");
  std::printf("peak RSS with the model built and placed, the largest rank: from the seed %.0f MiB, from a file %.0f "
              "MiB, replicated %.0f MiB\n", seeded, read,
              metric_value(dir.file("replicated/metrics.jsonl"), "setup_peak_rss_mib_max"));
  CHECK(read - seeded < 0.5 * model_mib);
}

TEST_CASE("under an address-space cap that the replicated run exceeds, dist.shard parameters trains a "
          "53M-parameter MLP, and the replicated run fails saying out of memory and on which rank",
          "[sharding][memory][slow]") {
  TempDir dir;
  // 784·4096 + 3·4096² + 4096·10 ≈ 53.5M parameters: 16 bytes each with AdamW is 818 MiB a rank
  // replicated, a quarter of it sharded over 4 ranks (plus the gathered units and, on rank 0, model.pt).
  auto command = [&](const std::string& name, const std::string& shard) {
    std::string c = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 4 " +
                    config_path("synthetic_mlp.yaml");
    for (const auto& s : {"run.output_dir=" + dir.file(name), std::string("train.max_steps=2"),
                          std::string("train.batch_size=16"), std::string("optim.name=adamw"),
                          std::string("data.eval_split=none"), std::string("checkpoint.every_epochs=0"),
                          std::string("model.hidden=[4096,4096,4096,4096]"), "dist.shard=" + shard})
      c += " --set '" + s + "'";
    // glibc reserves 64 MiB of address space per malloc arena, up to 8 a core, as threads first
    // allocate: two arenas keep a cap on address space about the model, not about thread timing.
    return "export MALLOC_ARENA_MAX=2; " + c;
  };
  auto free_run = run_shell(command("free", "parameters"), std::chrono::seconds(300));
  INFO(free_run.out << free_run.err);
  REQUIRE(free_run.exit_code == 0);
  const double peak = metric_value(dir.file("free/metrics.jsonl"), "peak_address_space_mib_max");
  REQUIRE(peak > 0);
  // The replicated run needs about 300 MiB more than that on every rank.
  const auto cap = "ulimit -v " + std::to_string(static_cast<long>((peak + 120) * 1024)) + "; ";
  auto replicated = run_shell(cap + command("replicated", "none"), std::chrono::seconds(300));
  INFO(replicated.out << replicated.err);
  CHECK(replicated.exit_code != 0);
  CHECK(std::regex_search(replicated.err, std::regex("rank [0-3]: out of memory: .*can't allocate memory.*; "
                                                     "without dist.shard every rank holds the whole model")));
  CHECK_FALSE(std::filesystem::exists(dir.file("replicated/model.pt")));
  auto sharded = run_shell(cap + command("sharded", "parameters"), std::chrono::seconds(300));
  INFO(sharded.out << sharded.err);
  CHECK(sharded.exit_code == 0);
  CHECK(std::filesystem::exists(dir.file("sharded/model.pt")));
}

TEST_CASE("dist.shard parameters evaluates when the ranks' eval shards hold different batch counts, with the "
          "replicated run's metrics",
          "[sharding][eval]") {
  TempDir dir;
  // 513 eval samples over 2 ranks in batches of 256: rank 0 runs 2 batches, rank 1 one.
  auto sets = [&](const std::string& name, const std::string& shard) {
    auto s = mlp_sets(dir, name, 32);
    for (auto& x : s)
      if (x == "data.eval_split=none") x = "data.synthetic_test_samples=513";
    s.insert(s.end(), {"eval.batch_size=256", "eval.every_steps=10", "dist.shard=" + shard, "dist.timeout_s=60"});
    return s;
  };
  auto replicated = ddprun(2, config_path("synthetic_mlp.yaml"), sets("none", "none"));
  INFO(replicated.out << replicated.err);
  REQUIRE(replicated.exit_code == 0);
  auto sharded = ddprun(2, config_path("synthetic_mlp.yaml"), sets("parameters", "parameters"));
  INFO(sharded.out << sharded.err);
  REQUIRE(sharded.exit_code == 0);
  double a = metric_value(dir.file("none/metrics.jsonl"), "eval_loss");
  double b = metric_value(dir.file("parameters/metrics.jsonl"), "eval_loss");
  CHECK(a > 0);
  CHECK(std::abs(a - b) < 1e-5);
}

}  // namespace DDP_TEST_FILE
