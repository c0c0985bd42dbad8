// Ranks as threads of one process (ddp-train --threads N, Note [Ranks as threads]) by real runs:
// model.pt bit-identical to N ddprun processes at 2 and 4 ranks, for the ConvNet and for a GPT
// whose dropout draws from each rank's own generator, for a TorchScript module whose dropout
// draws from LibTorch's, and for DLRM's sharded tables; a failing rank thread ends the run with
// one line naming it; SIGINT stops the threads with a checkpoint that processes resume to the
// uninterrupted run's bits. And the pieces: identities, the core split, the log by rank.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "ddp/loop/rank_log.h"
#include "ddp/loop/thread_ranks.h"
#include "support/log_capture.h"
#include "support/metric_values.h"
#include "support/python_fixtures.h"
#include "support/subprocess.h"
#include "support/token_files.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

// A small GPT on the GPL's bytes, with dropout: the ranks' draws must be their own.
std::string write_gpt_config(const TempDir& dir) {
  auto [train, val] = text_tokens();
  write_file(dir.file("train.bin"), llmc_shard(train));
  std::string path = dir.file("gpt.yaml");
  std::ofstream(path) << "data: {dataset: tokens, path: " << dir.file("train.bin") << ", eval_split: none}\n"
                      << "model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256, "
                         "bias: false, dropout: 0.1}\n"
                      << "optim: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
                      << "train: {task: causal_lm, epochs: 1, max_steps: 12, batch_size: 8, log_every: 1, "
                         "clip_grad_norm: 1.0}\n"
                      << "eval: {every_epochs: 0, at_start: false}\n"
                      << "checkpoint: {every_epochs: 0}\n";
  return path;
}

const std::string kConvNet = std::string(DDP_SOURCE_DIR) + "/configs/fashion_mnist_convnet.yaml";
const std::vector<std::string> kConvNetSets = {"train.max_steps=12", "train.batch_size=16", "data.eval_split=none",
                                               "eval.every_epochs=0", "checkpoint.every_epochs=0"};

std::string sets_text(const std::vector<std::string>& sets) {
  std::string text;
  for (const auto& s : sets) text += " --set '" + s + "'";
  return text;
}

// N ranks as ddprun's processes, or as threads of one ddp-train; one intra-op thread a rank either way.
CommandResult processes(int n, const std::string& config, const std::vector<std::string>& sets) {
  return run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " + std::to_string(n) + " " +
                       config + sets_text(sets),
                   std::chrono::seconds(240));
}
CommandResult threads(int n, const std::string& config, const std::vector<std::string>& sets,
                      const std::string& env = "") {
  return run_shell(env + " OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + config + " --threads " + std::to_string(n) +
                       sets_text(sets),
                   std::chrono::seconds(240));
}

// The names of the tensors in which two model.pt files differ at all ("" when none does).
std::string differing(const std::string& a, const std::string& b) {
  auto x = load_weights(a), y = load_weights(b);
  REQUIRE(x.size() == y.size());
  std::string names;
  for (const auto& [name, tensor] : x)
    if (!y.count(name) || !torch::equal(tensor, y.at(name))) names += name + " ";
  return names;
}

void check_bit_identical(const std::string& config, std::vector<std::string> sets, int n) {
  TempDir dir;
  auto with_out = [&](const std::string& out) {
    auto all = sets;
    all.push_back("run.output_dir=" + dir.file(out));
    return all;
  };
  auto p = processes(n, config, with_out("processes"));
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  auto t = threads(n, config, with_out("threads"));
  INFO(t.out << t.err);
  REQUIRE(t.exit_code == 0);
  CHECK_THAT(t.out, Contains("world size " + std::to_string(n)));
  CHECK_THAT(t.out, Contains(std::to_string(n) + " ranks as threads of this process"));
  CHECK_THAT(t.out, Contains("peak RSS per process of " + std::to_string(n) + " rank threads"));
  CHECK(differing(dir.file("processes/model.pt"), dir.file("threads/model.pt")) == "");
}

}  // namespace

TEST_CASE("rank threads train the ConvNet to ddprun's model.pt bit for bit, at 2 and 4 ranks", "[threads]") {
  for (int n : {2, 4}) {
    INFO(n << " ranks");
    check_bit_identical(kConvNet, kConvNetSets, n);
  }
}

TEST_CASE("rank threads train a GPT with dropout to ddprun's model.pt bit for bit, at 2 and 4 ranks", "[threads][gpt]") {
  TempDir data;
  const std::string config = write_gpt_config(data);
  for (int n : {2, 4}) {
    INFO(n << " ranks");
    check_bit_identical(config, {}, n);
  }
  // The comparison can fail: another seed's dropout masks end elsewhere.
  TempDir dir;
  REQUIRE(threads(2, config, {"run.output_dir=" + dir.file("a")}).exit_code == 0);
  REQUIRE(threads(2, config, {"run.output_dir=" + dir.file("b"), "run.seed=1"}).exit_code == 0);
  CHECK(differing(dir.file("a/model.pt"), dir.file("b/model.pt")) != "");
}

TEST_CASE(
    "rank threads train a TorchScript module with dropout to ddprun's model.pt bit for bit, taking turns at "
    "LibTorch's generator",
    "[threads][torchscript]") {
  // The module's dropout (bn.pt: BatchNorm, then nn.Dropout(0.2)) draws from LibTorch's default
  // generator, not from the rank's: two threads drawing from it at once would share its draws.
  TempDir data;
  const std::string config = data.file("bn.yaml");
  std::ofstream(config) << "data: {dataset: npy, path: " << python_fixture("train_x.npy")
                        << ", labels: " << python_fixture("train_y.npy") << ", normalize: none, eval_split: none}\n"
                        << "model: {name: torchscript, path: " << python_fixture("bn.pt") << "}\n"
                        << "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                        << "train: {max_steps: 12, batch_size: 16, log_every: 4}\n"
                        << "eval: {every_epochs: 0}\n"
                        << "checkpoint: {every_epochs: 0}\n";
  for (int n : {2, 4}) {
    INFO(n << " ranks");
    check_bit_identical(config, {}, n);
  }
  // Under dist.shard parameters the chain runs block by block, gathering each block's parameters
  // between the turns: a block at a time takes its turn.
  check_bit_identical(config, {"model.path=" + python_fixture("dropout_chain.pt"), "dist.shard=parameters"}, 2);
  // Where a pass routes the layers through collectives, a rank waiting for its turn would hold up
  // the one that has it: refused in one line.
  TempDir dir;
  auto r = threads(2, config,
                   {"run.output_dir=" + dir.file("run"), "model.path=" + python_fixture("dropout_chain.pt"),
                    "dist.tensor=2", "dist.tensor_plan=0=colwise, 3=rowwise"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("dropout_chain.pt draws random numbers in its forward (aten::dropout) from LibTorch's one "
                             "CPU generator, which rank threads (dist.threads) take turns at; a pass that routes its "
                             "layers through collectives (dist.tensor, model.embedding_sharding)") &&
                        Contains("run the ranks as processes"));
}

TEST_CASE("rank threads train DLRM with row-sharded tables to ddprun's model.pt bit for bit", "[threads][clicks]") {
  TempDir data;
  const std::string log = data.file("clicks.tsv");
  auto made = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/make_clicks.py", log, "--rows",
                           "1000", "--seed", "7", "--vocabulary", "2000"},
                          std::chrono::seconds(120));
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  // The lookups' all-to-alls and the lockstep evaluation, between threads.
  check_bit_identical(std::string(DDP_SOURCE_DIR) + "/configs/clicks_dlrm.yaml",
                      {"data.path=" + log, "data.eval_path=" + log, "model.embedding_rows=[4000]",
                       "model.embedding_sharding=row", "train.max_steps=20", "train.batch_size=16",
                       "checkpoint.every_epochs=0"},
                      2);
}

TEST_CASE("a rank thread that throws ends the run at once, in one line naming its rank, non-zero", "[threads][errors]") {
  TempDir dir;
  auto r = threads(4, kConvNet, [&] {
    auto sets = kConvNetSets;
    sets.push_back("run.output_dir=" + dir.file("run"));
    return sets;
  }(), "DDPRUN_TEST_FAIL_AT_STEP=2:3");
  INFO(r.out << r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  CHECK(count_lines(r.err, "ddp-train: rank 2: failed: DDPRUN_TEST_FAIL_AT_STEP: failing at step 3, as asked") == 1);
  int lines = 0;
  for (char c : r.err) lines += c == '\n';
  CHECK(lines == 1);  // the other ranks, left waiting for rank 2, say nothing
  CHECK_FALSE(std::filesystem::exists(dir.file("run/model.pt")));
}

TEST_CASE("under ddprun, a rank thread that fails is the rank its summary names",
          "[threads][errors]") {
  // The worker's own RANK is its process's: the summary named rank 0 for rank thread 1's failure.
  TempDir dir;
  auto sets = kConvNetSets;
  sets.insert(sets.end(), {"dist.threads=2", "run.output_dir=" + dir.file("run")});
  auto r = run_shell("DDPRUN_TEST_FAIL_AT_STEP=1:3 OMP_NUM_THREADS=1 " + bin("ddprun") +
                         " --standalone --nproc-per-node 1 " + kConvNet + sets_text(sets),
                     std::chrono::seconds(240));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("ddprun: rank 1 failed first: exit code 1 (a thread of the worker of local rank 0 on "));
  CHECK_THAT(r.err, Contains("ddprun: last 1 stderr line(s) of rank 1's process:"));
  CHECK_THAT(r.err, !Contains("rank 0 failed first"));
}

TEST_CASE("SIGINT stops rank threads with a checkpoint, which ddprun's processes resume to the same bits",
          "[threads][signals][gpt]") {
  TempDir data, dir;
  const std::string config = write_gpt_config(data);
  auto straight = threads(2, config, {"run.output_dir=" + dir.file("straight"), "train.max_steps=20"});
  REQUIRE(straight.exit_code == 0);
  const std::string log = dir.file("log");
  auto r = run_shell("DDPRUN_TEST_STEP_DELAY=0:200 OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + config +
                         " --threads 2 --set run.output_dir=" + dir.file("cut") + " --set train.max_steps=20 > " + log +
                         " 2>&1 & L=$!; " + until_logged(log, "step 4/") + "kill -INT $L; wait $L; echo status=$?",
                     std::chrono::seconds(120));
  const std::string output = read_file(log);
  INFO(r.out << r.err << output);
  CHECK_THAT(r.out, Contains("status=130"));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("cut/model.pt")));
  auto resumed = processes(2, config, {"run.output_dir=" + dir.file("cut"), "train.max_steps=20"});
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("resumed from"));
  CHECK(differing(dir.file("straight/model.pt"), dir.file("cut/model.pt")) == "");
}

TEST_CASE("rank threads' monitor gives each its share of the process's CPU and RSS, which add up to the process's",
          "[threads][monitor]") {
  TempDir dir;
  // 64 steps of 30 ms at least: records to read however fast the machine (unslowed, the run could
  // end in 0.3 s, before the monitor's first).
  auto t = threads(2, std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml",
                   {"run.output_dir=" + dir.file("run"), "train.epochs=2", "model.hidden=[512,512]",
                    "monitor.every_s=0.3", "monitor.log_every_s=0.3"},
                   "DDPRUN_TEST_STEP_DELAY=0:30");
  INFO(t.out << t.err);
  REQUIRE(t.exit_code == 0);
  const std::string metrics = dir.file("run/metrics.jsonl");
  const double rss0 = metric_value(metrics, "sys_rss_mib_rank0"), rss1 = metric_value(metrics, "sys_rss_mib_rank1");
  // The peak too is each rank's share: each rank's was the whole process's, which the report's
  // summary gave as the peak per rank beside a chart of shares.
  const double peak0 = metric_value(metrics, "peak_rss_mib_rank0"), peak1 = metric_value(metrics, "peak_rss_mib_rank1");
  CHECK(std::abs(peak0 - peak1) <= 0.05 * peak0);  // one process, read by each thread
  const double process_peak = peak0 + peak1;
  REQUIRE(rss0 > 0);
  REQUIRE(rss1 > 0);
  // Each rank reported the whole process's RSS: their sum was twice the process's peak.
  CHECK(rss0 + rss1 <= 1.05 * process_peak);
  CHECK(rss0 + rss1 >= 0.5 * process_peak);
  CHECK(metric_value(metrics, "sys_cpu_percent_rank0") >= 0);
}

TEST_CASE("rank threads number ranks node by node and split the cores among them", "[threads]") {
  ddp::WorkerIdentity alone;
  auto third = ddp::rank_thread_identity(alone, 4, 3);
  CHECK(third.rank == 3);
  CHECK(third.world_size == 4);
  CHECK(third.local_rank == 3);
  CHECK(third.local_world_size == 4);
  CHECK(third.node_rank == 0);
  // One process per node under ddprun --nproc-per-node 1: process 1 of 2 holds ranks 4..7.
  ddp::WorkerIdentity second_node;
  second_node.rank = 1;
  second_node.world_size = 2;
  second_node.local_world_size = 1;
  second_node.node_rank = 1;
  second_node.node_count = 2;
  auto sixth = ddp::rank_thread_identity(second_node, 4, 2);
  CHECK(sixth.rank == 6);
  CHECK(sixth.world_size == 8);
  CHECK(sixth.local_rank == 2);
  CHECK(sixth.node_rank == 1);
  CHECK(sixth.node_count == 2);

  CHECK(ddp::intra_op_threads_per_rank(nullptr, 16, 4) == 4);
  CHECK(ddp::intra_op_threads_per_rank(nullptr, 2, 4) == 1);  // never none
  CHECK(ddp::intra_op_threads_per_rank("8", 16, 4) == 2);    // OMP_NUM_THREADS is the process's budget
  CHECK_THROWS_WITH(ddp::intra_op_threads_per_rank("lots", 16, 4), Contains("OMP_NUM_THREADS: expected a positive count"));
}

TEST_CASE("the log by rank thread: all of rank 0, the others' warnings named, nothing else", "[threads]") {
  LogCapture capture;
  spdlog::set_level(spdlog::level::info);
  ddp::log_by_rank_thread();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([r] {
      ddp::set_log_rank(r);
      spdlog::info("info from {}", r);
      spdlog::warn("warning from {}", r);
    });
  for (auto& rank : ranks) rank.join();
  spdlog::info("from no rank");
  const std::string text = capture.text();
  INFO(text);
  CHECK(capture.count("info from 0") == 1);
  CHECK(capture.count("info from 1") + capture.count("info from 2") == 0);
  CHECK(capture.count("warning warning from 0") == 1);
  CHECK(capture.count("warning rank 1: warning from 1") == 1);
  CHECK(capture.count("warning rank 2: warning from 2") == 1);
  CHECK(capture.count("from no rank") == 1);
}

TEST_CASE("rank threads refuse what they cannot be, each in one line naming the key", "[threads][errors]") {
  TempDir dir;
  auto refused = [&](const std::string& command) {
    auto r = run_shell(command + " --set run.output_dir=" + dir.file("run") + sets_text(kConvNetSets),
                       std::chrono::seconds(120));
    INFO(command << "\n" << r.out << r.err);
    CHECK(r.exit_code == 2);
    int lines = 0;
    for (char c : r.err) lines += c == '\n';
    CHECK(lines == 1);
    return r.err;
  };
  const std::string train = bin("ddp-train") + " " + kConvNet;
  CHECK_THAT(refused(train + " --devices 0,0"), Contains("dist.devices: a device may appear once"));
  CHECK_THAT(refused(train + " --devices 0,x"), Contains("--devices: expected CUDA device numbers"));
  CHECK_THAT(refused(train + " --devices 0,1 --threads 3"), Contains("dist.devices: gives 2 rank threads and dist.threads 3"));
  CHECK_THAT(refused(train + " --devices 0 --set dist.device=cpu"), Contains("dist.devices: names CUDA devices"));
  CHECK_THAT(refused(train + " --threads 2x"), Contains("--threads: expected a base-10 integer, got '2x'"));
  // Base 10, as --set dist.threads=010 reads it (CLI11 took 010 for 8).
  auto printed = run_shell(train + " --threads 010 --print-config");
  CHECK(count_lines(printed.out, "  threads: 10") == 1);
#ifndef DDP_WITH_CUDA
  CHECK_THAT(refused(train + " --devices 0"), Contains("dist.devices: CUDA devices need a CUDA build"));
  // Two of them: refused once, before a rank thread says it drives a device.
  CHECK_THAT(refused(train + " --devices 0,1"),
             Contains("ddp-train: rank 0: error: dist.devices: CUDA devices need a CUDA build") && !Contains("rank 1"));
#endif
  // Under a launcher that runs two processes on this node: one process a node is the layout.
  auto r = run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " + kConvNet +
                         " --set dist.threads=2 --set run.output_dir=" + dir.file("run") + sets_text(kConvNetSets),
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.out + r.err, Contains("dist.threads: this node runs 2 processes; rank threads need one process per node"));
}

TEST_CASE("one rank-thread process per node under ddprun --nnodes 2 trains to the processes' model.pt bit for bit",
          "[threads][multinode]") {
  TempDir dir;
  // Two launchers on this host, as two nodes: 2 ranks each, as processes and then as threads.
  auto two_nodes = [&](const std::string& per_node, const std::string& out, const std::string& more = "") {
    std::string port = std::to_string(free_port());
    std::string launch = "OMP_NUM_THREADS=1 " + bin("ddprun");
    std::string common = " --nnodes 2 " + per_node + " --master-addr 127.0.0.1 --master-port " + port +
                         " --rdzv-timeout 30 " + kConvNet + " --set run.output_dir=" + dir.file(out) +
                         sets_text(kConvNetSets) + more;
    auto r = run_shell(launch + " --node-rank 1" + common + " & B=$!; " + launch + " --node-rank 0" + common +
                           "; A=$?; wait $B; echo statuses=$A,$?",
                       std::chrono::seconds(240));
    INFO(r.out << r.err);
    CHECK(count_lines(r.out, "statuses=0,0") == 1);
    CHECK_THAT(r.out, Contains("world size 4"));
    return r;
  };
  two_nodes("--nproc-per-node 2", "processes");
  auto threads = two_nodes("--nproc-per-node 1", "threads", " --set dist.threads=2");
  CHECK_THAT(threads.out, Contains("2 ranks as threads of this process"));
  CHECK(differing(dir.file("processes/model.pt"), dir.file("threads/model.pt")) == "");
}

TEST_CASE("ddprun restarts a killed rank-thread process, which resumes to the uninterrupted run's bits",
          "[threads][faults][gpt]") {
  TempDir data, dir;
  const std::string config = write_gpt_config(data);
  const std::vector<std::string> sets = {"train.max_steps=20", "checkpoint.every_steps=5", "checkpoint.keep_last=10"};
  auto with_out = [&](const std::string& out) {
    auto all = sets;
    all.push_back("run.output_dir=" + dir.file(out));
    return all;
  };
  auto straight = threads(2, config, with_out("straight"));
  INFO(straight.out << straight.err);
  REQUIRE(straight.exit_code == 0);
  const std::string killed = dir.file("killed");
  // 0.4 s a step: 4 s between step 10's checkpoint and the run's end for the kill to land, loaded or not.
  auto r = run_shell("DDPRUN_TEST_STEP_DELAY=0:400 OMP_NUM_THREADS=1 " + bin("ddprun") +
                         " --standalone --nproc-per-node 1 --max-restarts 1 " + config + " --set dist.threads=2" +
                         sets_text(with_out("killed")) + " & L=$!; " +
                         until_true("[ -e " + killed + "/checkpoints/step_0000000010.json ]", 30) +
                         "pkill -KILL -n -f '[d]dp-train.*" + killed + "'; wait $L; echo status=$?",
                     std::chrono::seconds(240));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=0") == 1);
  CHECK_THAT(r.err, Contains("signal 9 (SIGKILL)"));
  CHECK_THAT(r.out, Contains("resumed from"));
  CHECK(differing(dir.file("straight/model.pt"), killed + "/model.pt") == "");
}

}  // namespace DDP_TEST_FILE
