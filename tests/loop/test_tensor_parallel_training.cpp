// Tensor parallelism (dist.tensor) by real ddprun processes: the GPT split over a tensor group of 2,
// alone, beside 2 data replicas, beside ZeRO-3 or ZeRO-1 over 2 ranks, with sequence parallelism
// (alone, × 2 replicas, × ZeRO-3), and in 2 pipeline stages (with
// 2 replicas: pipeline × tensor × data at world 8), trains 30 AdamW steps
// (weight decay, clipping) to world 1's weights within 1e-5 with the same held-out loss; its sharded
// checkpoints resume at world 1, replicated, under ZeRO-3 and at other tensor layouts, to the same
// weights; with dropout it trains to world 1's loss within noise; what it does not compose with yet
// says so. A Llama by its built-in plan, and a TorchScript transformer split by dist.tensor_plan,
// train to world 1's weights too.
#include <torch/script.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/metric_values.h"
#include "support/python_fixtures.h"
#include "support/subprocess.h"
#include "support/token_files.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

CommandResult ddprun(int nproc, const std::string& config, const std::vector<std::string>& sets) {
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " +
                        std::to_string(nproc) + " " + config;
  for (const auto& s : sets) command += " --set '" + s + "'";
  return run_shell(command, std::chrono::seconds(300));
}

// A small GPT with biases on the license's bytes, 16 windows a step at every layout, a checkpoint
// at step 15 of 30.
std::string gpt_config(const TempDir& dir) {
  std::string path = dir.file("gpt.yaml");
  std::ofstream(path) << text_data_section(dir)
                      << "model: {name: gpt, n_layer: 2, n_head: 4, n_embd: 32, block_size: 32, vocab_size: 256, "
                         "bias: true, dropout: 0}\n"
                      << "optim: {name: adamw, lr: 0.003, weight_decay: 0.1, decay_params: matrices, beta2: 0.99}\n"
                      << "schedule: {name: cosine, warmup_steps: 10}\n"
                      << "train: {task: causal_lm, epochs: 5, global_batch_size: 16, clip_grad_norm: 1.0, "
                         "max_steps: 30}\n"
                      << "eval: {every_epochs: 0, at_start: false, batch_size: 64}\n"
                      << "checkpoint: {every_epochs: 0, every_steps: 15, keep_last: 5}\n";
  return path;
}

// `name`'s run cut back to its step-15 checkpoint, as `copy`.
void cut_back(const TempDir& dir, const std::string& name, const std::string& copy) {
  fs::copy(dir.file(name), dir.file(copy), fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(dir.file(copy + "/checkpoints")))
    if (entry.path().filename().string().find("0000000030") != std::string::npos) fs::remove(entry.path());
  fs::remove(dir.file(copy + "/model.pt"));
  fs::remove(dir.file(copy + "/metrics.jsonl"));
}

}  // namespace

TEST_CASE(
    "on two nodes of 2 ranks, a tensor group a node and 2 replicas or 2 pipeline stages across them trains to "
    "world 1's weights, the node's shared memory on, and a tensor group across nodes of 1 too, with a warning",
    "[tensor][multinode]") {
  // The node's shared-memory engine sums over every node once the world spans nodes: lent to a
  // tensor group, it summed the two nodes' groups (wrong weights, exit 0), or, with a stage on each
  // node, waited for the other node's leader, which never came (a hang).
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto one = ddprun(1, config, {"run.output_dir=" + dir.file("one")});
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);
  // across: nodes of one rank each, whose tensor group spans both (the same weights, and a warning).
  for (const std::string& layout : {"data", "pipeline", "across"}) {
    std::string launch = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --nnodes 2 --nproc-per-node " +
                         (layout == "across" ? "1" : "2") + " --master-addr 127.0.0.1 --master-port " +
                         std::to_string(free_port()) + " --rdzv-timeout 30 " + config +
                         " --set dist.tensor=2 --set dist.shared_memory=true --set dist.timeout_s=60 --set "
                         "run.output_dir=" +
                         dir.file(layout) + (layout == "pipeline" ? " --set dist.pipeline=2" : "");
    auto r = run_shell(launch + " --node-rank 1 > " + dir.file(layout + "-node1.log") + " 2>&1 & B=$!; " + launch +
                           " --node-rank 0; A=$?; wait $B; echo statuses=$A,$?",
                       std::chrono::seconds(240));
    INFO(layout << ": " << r.out << r.err << read_file(dir.file(layout + "-node1.log")));
    REQUIRE(count_lines(r.out, "statuses=0,0") == 1);
    CHECK(largest_difference(dir.file("one/model.pt"), dir.file(layout + "/model.pt")) < 1e-5);
    const std::string across =
        "dist.tensor 2: tensor groups span nodes of 1 rank(s), so every layer's all-reduces "
        "cross the network";
    if (layout == "across")
      CHECK_THAT(r.out + r.err, Contains(across));
    else
      CHECK_THAT(r.out + r.err, !Contains("tensor groups span"));
  }
}

TEST_CASE("a GPT at dist.tensor 2, alone, × 2 data replicas, × ZeRO-3 and × ZeRO-1 over 2, with sequence "
          "parallelism, × 2 pipeline stages (and × 2 replicas: 3-D), trains 30 AdamW steps to world 1's weights within 1e-5, and its checkpoints resume "
          "at other layouts",
          "[tensor]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto run = [&](int nproc, const std::string& name, const std::vector<std::string>& sets) {
    auto r = ddprun(nproc, config, [&] {
      std::vector<std::string> all{"run.output_dir=" + dir.file(name)};
      all.insert(all.end(), sets.begin(), sets.end());
      return all;
    }());
    INFO(name << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  run(1, "one", {});
  const double eval_one = metric_value(dir.file("one/metrics.jsonl"), "eval_loss");
  CHECK(eval_one > 0);
  struct Layout {
    std::string name;
    int world;
    std::vector<std::string> sets;
    std::string last_shard;  // of the step-15 checkpoint: one per tensor rank and data shard
  };
  const std::vector<Layout> layouts{
      {"tensor", 2, {"dist.tensor=2"}, "shard-1-of-2"},
      {"tensor_data", 4, {"dist.tensor=2"}, "shard-1-of-2"},
      {"tensor_zero3", 4, {"dist.tensor=2", "dist.shard=parameters", "dist.data_shard=2"}, "shard-3-of-4"},
      {"tensor_zero1", 4, {"dist.tensor=2", "dist.shard=optimizer", "dist.data_shard=2"}, "shard-3-of-4"},
      {"tensor_zero1_alone", 2, {"dist.tensor=2", "dist.shard=optimizer"}, "shard-1-of-2"},  // nothing to split
      {"tensor_sequence", 2, {"dist.tensor=2", "dist.sequence_parallel=true"}, "shard-1-of-2"},
      {"tensor_sequence_data", 4, {"dist.tensor=2", "dist.sequence_parallel=true"}, "shard-1-of-2"},
      {"tensor_sequence_zero3",
       4,
       {"dist.tensor=2", "dist.sequence_parallel=true", "dist.shard=parameters"},
       "shard-3-of-4"},
      {"pipeline_tensor", 4, {"dist.tensor=2", "dist.pipeline=2"}, "shard-3-of-4"},
      {"pipeline_tensor_data", 8, {"dist.tensor=2", "dist.pipeline=2"}, "shard-3-of-4"},
      {"pipeline_tensor_zero3", 8, {"dist.tensor=2", "dist.pipeline=2", "dist.shard=parameters"}, "shard-7-of-8"}};
  for (const auto& [name, nproc, sets, last_shard] : layouts) {
    auto r = run(nproc, name, sets);
    CHECK_THAT(r.out, Contains(", each rank a tensor group of 2 ranks (train.global_batch_size)"));
    // A data_shard group of one rank splits nothing, and says so (it used to be silent).
    const bool said = (r.out + r.err)
                          .find(
                              "dist.shard optimizer does nothing here: each data_shard group of the "
                              "mesh") != std::string::npos;
    CHECK(said == (name == "tensor_zero1_alone"));
    // Each rank holds half of its split layers' weights: with stages, of its stage's.
    const bool staged = name.find("pipeline") != std::string::npos;
    CHECK_THAT(r.out, Contains("dist.tensor 2: 5 Linear layers split colwise and 4 rowwise, 1 Embedding by "
                               "vocabulary; the logits stay split by vocabulary (loss-parallel cross-entropy); this "
                               "rank holds " + std::string(staged ? "0.04 MiB of their 0.08" : "0.06 MiB of their 0.13") +
                               " MiB of parameters (1/2)"));
    double worst = largest_difference(dir.file("one/model.pt"), dir.file(name + "/model.pt"));
    INFO(name << ": largest difference from world 1 " << worst);
    CHECK(worst < 1e-5);
    CHECK(metric_value(dir.file(name + "/metrics.jsonl"), "eval_loss") == Approx(eval_one).margin(1e-5));
    // Each held-out sample counted once: a tensor group's ranks all see the last stage's batches.
    CHECK(metric_value(dir.file(name + "/metrics.jsonl"), "eval_samples") ==
          metric_value(dir.file("one/metrics.jsonl"), "eval_samples"));
    // model.pt is whole, the head still the embedding; each tensor rank wrote its shard of the checkpoint.
    auto w = load_weights(dir.file(name + "/model.pt"));
    CHECK(w.at("transformer.wte.weight").sizes() == torch::IntArrayRef({256, 32}));
    CHECK(torch::equal(w.at("lm_head.weight"), w.at("transformer.wte.weight")));
    CHECK(fs::exists(dir.file(name + "/checkpoints/step_0000000015." + last_shard + ".pt")));
  }
  // Resharding: a tensor-parallel checkpoint resumes replicated at world 1, under ZeRO-3 and in
  // pipeline stages; a replicated one at dist.tensor 2, and 3-D at tensor alone; each ends at world
  // 1's weights.
  struct Resume {
    std::string from;
    int world;
    std::vector<std::string> layout;
  };
  for (const Resume& resume : std::vector<Resume>{{"tensor", 1, {}},
                                                  {"one", 2, {"dist.tensor=2"}},
                                                  {"tensor_data", 2, {"dist.tensor=2"}},
                                                  {"tensor", 2, {"dist.shard=parameters"}},
                                                  {"tensor_zero3", 4, {"dist.tensor=2"}},
                                                  {"pipeline_tensor_data", 2, {"dist.tensor=2"}},
                                                  {"tensor_data", 2, {}},
                                                  {"tensor_data", 1, {}},
                                                  {"tensor", 4, {"dist.tensor=2", "dist.pipeline=2"}}}) {
    const std::string name = resume.from + "_at_" + std::to_string(resume.world) + (resume.layout.empty() ? "" : "_" + std::to_string(resume.layout.size()) + resume.layout.front().substr(5, 5));
    cut_back(dir, resume.from, name);
    auto r = run(resume.world, name, resume.layout);
    CHECK_THAT(r.out, Contains("at step 15"));
    double worst = largest_difference(dir.file("one/model.pt"), dir.file(name + "/model.pt"));
    INFO(name << ": largest difference from world 1 " << worst);
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("sequence parallelism holds less activation memory per rank than dist.tensor alone (printed)", "[tensor]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto activations = [&](const std::string& name, const std::string& sequence) {
    auto r = ddprun(2, config, {"run.output_dir=" + dir.file(name), "dist.tensor=2", "dist.sequence_parallel=" + sequence,
                                "model.block_size=128", "model.n_embd=64", "train.max_steps=5",
                                "checkpoint.every_steps=0"});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("peak activation memory per rank: "));
    return metric_value(dir.file(name + "/metrics.jsonl"), "activation_mib_max");
  };
  const double tensor = activations("tensor", "false"), sequence = activations("sequence", "true");
  INFO("peak activation MiB per rank: dist.tensor 2 " << tensor << ", with sequence parallelism " << sequence);
  CHECK(sequence < tensor);
  CHECK(sequence > 0);
}

TEST_CASE("in bf16, dist.tensor 2 with sequence parallelism trains to world 1's held-out loss within 0.01 (Gloo "
          "sums its bf16 activations as float32)",
          "[tensor]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto eval_loss = [&](int nproc, const std::string& name, const std::string& tensor) {
    auto r = ddprun(nproc, config, {"run.output_dir=" + dir.file(name), "train.precision=bf16", "dist.tensor=" + tensor,
                                    std::string("dist.sequence_parallel=") + (tensor == "1" ? "false" : "true"),
                                    "checkpoint.every_steps=0"});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return metric_value(dir.file(name + "/metrics.jsonl"), "eval_loss");
  };
  const double one = eval_loss(1, "one", "1"), tensor = eval_loss(2, "tensor", "2");
  INFO("world 1 " << one << ", dist.tensor 2 " << tensor);
  CHECK(std::abs(one - tensor) < 0.01);
}

TEST_CASE("with label smoothing 0.1, dist.tensor 2 with sequence parallelism trains to world 1's weights within 1e-5",
          "[tensor]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto run = [&](int nproc, const std::string& name, const std::string& tensor) {
    auto r = ddprun(nproc, config, {"run.output_dir=" + dir.file(name), "train.label_smoothing=0.1",
                                    "dist.tensor=" + tensor, std::string("dist.sequence_parallel=") + (tensor == "1" ? "false" : "true")});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  };
  run(1, "one", "1");
  run(2, "tensor", "2");
  double worst = largest_difference(dir.file("one/model.pt"), dir.file("tensor/model.pt"));
  INFO("largest difference from world 1 " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("activation checkpointing under dist.tensor 2, with and without sequence parallelism, with dropout 0.1, "
          "trains the same weights as without it",
          "[tensor]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  for (std::string sequence : {"false", "true"}) {
    auto run = [&](const std::string& name, const std::string& checkpointing) {
      auto r = ddprun(2, config, {"run.output_dir=" + dir.file(name), "model.dropout=0.1", "dist.tensor=2",
                                  "dist.sequence_parallel=" + sequence, "model.activation_checkpointing=" + checkpointing,
                                  "checkpoint.every_steps=0"});
      INFO(r.out << r.err);
      REQUIRE(r.exit_code == 0);
    };
    run("plain_" + sequence, "none");
    run("recomputed_" + sequence, "full");
    // The recomputation draws the same dropout masks (the rank's generator and each region's, Note
    // [Tensor parallelism]), so only the order of float sums may differ.
    double worst = largest_difference(dir.file("plain_" + sequence + "/model.pt"),
                                      dir.file("recomputed_" + sequence + "/model.pt"));
    INFO("sequence parallel " << sequence << ": largest difference " << worst);
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("with dropout 0.1 and sequence parallelism at dist.tensor 2, a run resumed from its step-15 checkpoint "
          "ends bit-identical to the uninterrupted one",
          "[tensor]") {
  // A forward under sequence parallelism ends in a tensor region, whose generator is then the
  // thread's: the checkpoint took that one's state for the rank's, and the resumed run's masks differed.
  TempDir dir;
  const std::string config = gpt_config(dir);
  const std::vector<std::string> sets{"model.dropout=0.1", "dist.tensor=2", "dist.sequence_parallel=true"};
  auto run = [&](const std::string& name) {
    auto with = sets;
    with.push_back("run.output_dir=" + dir.file(name));
    auto r = ddprun(2, config, with);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  run("straight");
  cut_back(dir, "straight", "resumed");
  CHECK_THAT(run("resumed").out, Contains("resumed from"));
  const std::string straight = read_file(dir.file("straight/model.pt"));
  CHECK(!straight.empty());
  const bool identical = straight == read_file(dir.file("resumed/model.pt"));
  CHECK(identical);
}

TEST_CASE("with dropout 0.1, dist.tensor 2 trains to world 1's held-out loss within noise, over 3 seeds of 240 steps",
          "[tensor]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto eval_loss = [&](int nproc, const std::string& name, const std::vector<std::string>& sets) {
    std::vector<std::string> all{"run.output_dir=" + dir.file(name), "train.max_steps=240", "checkpoint.every_steps=0"};
    all.insert(all.end(), sets.begin(), sets.end());
    auto r = ddprun(nproc, config, all);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return metric_value(dir.file(name + "/metrics.jsonl"), "eval_loss");
  };
  // Its masks differ from world 1's (Megatron's RNG tracker gives each rank's heads their own), so a
  // run agrees with world 1 as another seed would: here seeds spread over about 0.2 nats.
  double one = 0, tensor = 0;
  for (std::string seed : {"1", "7", "9"}) {
    one += eval_loss(1, "one_" + seed, {"model.dropout=0.1", "run.seed=" + seed}) / 3;
    tensor += eval_loss(2, "tensor_" + seed, {"model.dropout=0.1", "run.seed=" + seed, "dist.tensor=2"}) / 3;
  }
  const double without = eval_loss(2, "tensor_no_dropout", {"dist.tensor=2", "run.seed=1"});
  INFO("mean held-out loss: world 1 " << one << ", dist.tensor 2 " << tensor << "; seed 1 without dropout " << without);
  CHECK(std::abs(one - tensor) < 0.15);
  // The dropout took effect: the same seed without it trains other weights. (Its cost in held-out
  // loss, 0.07 to 0.25 nats, depends on the machine's rounding and is no test.)
  CHECK(largest_difference(dir.file("tensor_1/model.pt"), dir.file("tensor_no_dropout/model.pt")) > 1e-3);
}

TEST_CASE("a tensor layout that cannot be had: one line naming the key, exit 2, nothing written", "[tensor]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto fails = [&](int nproc, const std::vector<std::string>& sets, const std::string& message) {
    std::vector<std::string> all{"run.output_dir=" + dir.file("out"), "train.max_steps=2"};
    all.insert(all.end(), sets.begin(), sets.end());
    auto r = ddprun(nproc, config, all);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
    CHECK(!fs::exists(dir.file("out/model.pt")));
  };
  fails(2, {"dist.tensor=3"},
        "dist.pipeline, dist.data_shard, dist.tensor: dist.pipeline 1 × dist.data_shard 1 × dist.tensor 3 = 3 does "
        "not divide the world size 2");
  fails(2, {"dist.tensor=2", "model.n_head=3", "model.n_embd=48"},
        "dist.tensor 2: model.n_head 3 must divide by it (each rank computes whole heads)");
  fails(2, {"dist.tensor=2", "model.vocab_size=257"}, "dist.tensor 2: model.vocab_size 257 must divide by it");
  fails(2, {"dist.sequence_parallel=true"},
        "dist.sequence_parallel: splits the sequence over a tensor group: set dist.tensor above 1");
  fails(2, {"dist.tensor=2", "dist.sequence_parallel=true", "model.block_size=31"},
        "dist.sequence_parallel: model.block_size 31 must divide by dist.tensor 2");
  fails(4, {"dist.tensor=2", "dist.sequence_parallel=true", "dist.pipeline=2"},
        "dist.sequence_parallel: runs with dist.pipeline 1 for now, not 2");
}

namespace {

// dist.tensor_plan for python_fixtures.py's Transformer: Megatron's split of its blocks, the
// embedding by vocabulary, the head replicated.
const std::string kTransformerPlan =
    "dist.tensor_plan=embed=rowwise, layers.*.attn.q=colwise, layers.*.attn.k=colwise, layers.*.attn.v=colwise, "
    "layers.*.attn.o=rowwise, layers.*.up=colwise, layers.*.down=rowwise, head=replicate";

}  // namespace

TEST_CASE("a TorchScript transformer split by dist.tensor_plan trains at dist.tensor 2, alone and × 2 replicas, to "
          "world 1's weights within 1e-5, and model_scripted.pt is whole",
          "[tensor][torchscript]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  const std::vector<std::string> scripted{"model.name=torchscript", "model.path=" + python_fixture("transformer.pt")};
  auto run = [&](int nproc, const std::string& name, std::vector<std::string> sets) {
    sets.insert(sets.end(), scripted.begin(), scripted.end());
    sets.push_back("run.output_dir=" + dir.file(name));
    auto r = ddprun(nproc, config, sets);
    INFO(name << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  run(1, "one", {});
  const double eval_one = metric_value(dir.file("one/metrics.jsonl"), "eval_loss");
  for (const auto& [name, nproc] : std::vector<std::pair<std::string, int>>{{"tensor", 2}, {"tensor_data", 4}}) {
    auto r = run(nproc, name, {"dist.tensor=2", kTransformerPlan});
    CHECK_THAT(r.out, Contains("dist.tensor 2: 8 Linear layers split colwise and 4 rowwise, 1 Embedding by "
                               "vocabulary; this rank holds"));
    CHECK_THAT(r.out, Contains("dist.tensor_plan: the split module's output for the first training sample is the "
                               "whole module's (relative difference"));
    double worst = largest_difference(dir.file("one/model.pt"), dir.file(name + "/model.pt"));
    INFO(name << ": largest difference from world 1 " << worst);
    CHECK(worst < 1e-5);
    CHECK(metric_value(dir.file(name + "/metrics.jsonl"), "eval_loss") == Approx(eval_one).margin(1e-5));
    // The scripted module saved beside model.pt holds the same whole weights, under Python's code.
    auto whole = load_weights(dir.file(name + "/model.pt"));
    auto saved = torch::jit::load(dir.file(name + "/model_scripted.pt"));
    int compared = 0;
    for (const auto& parameter : saved.named_parameters()) {
      INFO(parameter.name);
      CHECK(torch::equal(parameter.value, whole.at(parameter.name)));
      ++compared;
    }
    CHECK(compared == static_cast<int>(whole.size()));
    CHECK(saved.dump_to_str(true, false, false).find("ddprun::") == std::string::npos);
  }
  // A tensor-parallel checkpoint resumes replicated at world 1.
  cut_back(dir, "tensor", "tensor_at_1");
  auto r = run(1, "tensor_at_1", {});
  CHECK_THAT(r.out, Contains("at step 15"));
  CHECK(largest_difference(dir.file("one/model.pt"), dir.file("tensor_at_1/model.pt")) < 1e-5);
}

TEST_CASE("a dist.tensor_plan that cannot be had: one line naming the key or the submodule, exit 2, nothing written",
          "[tensor][torchscript]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto fails = [&](const std::string& model, const std::vector<std::string>& sets, const std::string& message) {
    std::vector<std::string> all{"run.output_dir=" + dir.file("out"), "train.max_steps=2", "model.name=" + model};
    if (model == "torchscript") all.push_back("model.path=" + python_fixture("transformer.pt"));
    all.insert(all.end(), sets.begin(), sets.end());
    auto r = ddprun(2, config, all);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
    CHECK(!fs::exists(dir.file("out/model.pt")));
  };
  fails("torchscript", {"dist.tensor=2"},
        "dist.tensor 2: model.name torchscript has no built-in tensor-parallel plan (gpt and llama have): give "
        "one in dist.tensor_plan, or use dist.tensor: 1");
  fails("torchscript", {kTransformerPlan}, "dist.tensor_plan: splits layers over a tensor group: set dist.tensor above 1");
  fails("torchscript", {"dist.tensor=2", "dist.tensor_plan=layers.*.up=colwize"},
        "dist.tensor_plan: layers.*.up's style 'colwize' is not colwise, rowwise or replicate (did you mean colwise?)");
  fails("torchscript", {"dist.tensor=2", "dist.tensor_plan=layers.*.up"},
        "dist.tensor_plan: 'layers.*.up' is not PATH=STYLE");
  fails("torchscript", {"dist.tensor=2", "dist.tensor_plan=layers.*.attn.qq=colwise"},
        "dist.tensor: the plan's layers.*.attn.qq matches no submodule of the model");
  fails("torchscript", {"dist.tensor=2", "dist.tensor_plan=layers.*.norm1=colwise"},
        "dist.tensor: layers.0.norm1 is a LayerNorm, which cannot be split colwise (a Linear can, or an Embedding rowwise)");
  fails("torchscript", {"dist.tensor=2", "dist.tensor_plan=embed=colwise"},
        "dist.tensor: embed is an Embedding, which splits rowwise (by vocabulary), not colwise");
  fails("torchscript", {"dist.tensor=2", "dist.sequence_parallel=true", kTransformerPlan},
        "dist.sequence_parallel: runs with a model's built-in plan (model.name gpt or llama) for now, not with "
        "dist.tensor_plan");
  // A head other than lm_head split colwise would hand each rank its half of the logits as the whole
  // (torchtitan calls it output); a layer the model computes itself cannot be split.
  std::string head_split = kTransformerPlan;
  head_split.replace(head_split.find("head=replicate"), std::string("head=replicate").size(), "head=colwise");
  fails("torchscript", {"dist.tensor=2", head_split},
        "dist.tensor: head is split colwise with no rowwise layer in its block to join its output");
  auto mlp = ddprun(2, std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml",
                    {"run.output_dir=" + dir.file("mlp"), "dist.tensor=2", "dist.tensor_plan=layers.0=colwise"});
  INFO(mlp.out << mlp.err);
  CHECK(mlp.exit_code == 2);
  CHECK_THAT(mlp.err, Contains("dist.tensor: layers.0 is a layer this model computes itself, which no plan can split"));
  // The built-in GPT's fused q/k/v layer cannot be split rowwise.
  fails("gpt", {"dist.tensor=2", "dist.tensor_plan=transformer.h.*.attn.c_attn=rowwise"},
        "dist.tensor: transformer.h.0.attn.c_attn computes 3 projections side by side, which split colwise, not rowwise");
  // A module whose attention takes its head count from a constant runs a slice as narrower heads,
  // another model with no shape error, or fails to view it: the probe of the first sample refuses
  // both (Note [Probing a tensor plan]).
  const std::string cause = "the module's code likely assumes whole layers, such as a head count taken from a constant";
  for (const auto& [fixture, message] : std::vector<std::pair<std::string, std::string>>{
           {"transformer_fixed_heads.pt", "dist.tensor_plan: the split module's output for the first training sample "
                                          "differs from the whole module's by "},
           {"transformer_fixed_shape.pt", "dist.tensor_plan: the split module fails on the first training sample ("}}) {
    auto r = ddprun(2, config, {"run.output_dir=" + dir.file("out"), "train.max_steps=2", "model.name=torchscript",
                                "model.path=" + python_fixture(fixture), "dist.tensor=2", kTransformerPlan});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message) && Contains(cause));
    CHECK(!fs::exists(dir.file("out/model.pt")));
  }
  // The same module trains whole: only its split computes otherwise.
  auto whole = ddprun(1, config, {"run.output_dir=" + dir.file("whole"), "train.max_steps=2", "model.name=torchscript",
                                  "model.path=" + python_fixture("transformer_fixed_heads.pt")});
  INFO(whole.out << whole.err);
  CHECK(whole.exit_code == 0);
}

TEST_CASE("a Llama (grouped-query attention, untied and tied) at dist.tensor 2, alone, with sequence parallelism and "
          "× 2 replicas, trains 30 AdamW steps to world 1's weights",
          "[tensor][llama]") {
  TempDir dir;
  const std::string config = gpt_config(dir);
  auto run = [&](int nproc, const std::string& name, std::vector<std::string> sets) {
    for (const char* key : {"model.name=llama", "model.dim=32", "model.n_kv_heads=2", "model.ffn_dim=64"})
      sets.push_back(key);
    sets.push_back("run.output_dir=" + dir.file(name));
    auto r = ddprun(nproc, config, sets);
    INFO(name << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  struct Layout {
    std::string name;
    int world;
    std::vector<std::string> sets;
  };
  for (const std::string tied : {"false", "true"}) {
    const std::string tie = "model.tie_embeddings=" + tied, one = "one_" + tied;
    run(1, one, {tie});
    for (const auto& [name, world, sets] :
         std::vector<Layout>{{"tensor", 2, {"dist.tensor=2"}},
                             {"tensor_sequence", 2, {"dist.tensor=2", "dist.sequence_parallel=true"}},
                             {"tensor_data", 4, {"dist.tensor=2"}}}) {
      auto all = sets;
      all.push_back(tie);
      auto r = run(world, name + "_" + tied, all);
      CHECK_THAT(r.out, Contains("dist.tensor 2: 11 Linear layers split colwise and 4 rowwise, 1 Embedding by "
                                 "vocabulary; the logits stay split by vocabulary (loss-parallel cross-entropy)"));
      double worst = largest_difference(dir.file(one + "/model.pt"), dir.file(name + "_" + tied + "/model.pt"));
      INFO(name << " tied " << tied << ": largest difference from world 1 " << worst);
      // Tied, this small Llama amplifies rounding: plain data parallelism at world 2 ends 2.5e-5 from
      // world 1 too (measured), where untied it ends 2e-7 away. PyTorch alone does the same: the same
      // shape, 30 AdamW steps on a batch of 16 against the mean of two batches of 8 ends 6.7e-5 apart
      // tied and 2.3e-6 untied (tests/support/llama_reference.py's Llama, 2026-12-02).
      CHECK(worst < (tied == "true" ? 1e-4 : 1e-5));
    }
  }
  // A key/value head count the group cannot split.
  auto r = ddprun(2, config, {"model.name=llama", "model.dim=32", "model.n_kv_heads=1", "model.ffn_dim=64",
                              "dist.tensor=2", "run.output_dir=" + dir.file("refused")});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("dist.tensor 2: model.n_kv_heads 1 must divide by it (each rank holds whole key/value "
                             "heads, those of its query heads)"));
}

}  // namespace DDP_TEST_FILE
