// Integration tests of the trainer: real ddprun/ddp-train processes over loopback.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sstream>

#include "support/gpu.h"
#include "support/subprocess.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

using Weights = std::map<std::string, torch::Tensor>;

double max_difference(const Weights& a, const Weights& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& [name, tensor] : a)
    worst = std::max(worst, (tensor.to(torch::kDouble) - b.at(name).to(torch::kDouble)).abs().max().item<double>());
  return worst;
}

bool bit_identical(const Weights& a, const Weights& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, tensor] : a)
    if (!torch::equal(tensor, b.at(name))) return false;
  return true;
}

std::string config(const std::string& name) { return std::string(DDP_SOURCE_DIR) + "/configs/" + name; }

// Runs ddprun on a config with overrides; fails the test on a non-zero exit.
CommandResult train(int nproc, const std::string& yaml, const std::vector<std::string>& sets, bool expect_ok = true) {
  std::vector<std::string> argv{bin("ddprun"), "--standalone", "--nproc-per-node", std::to_string(nproc), config(yaml)};
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  auto r = run_command(argv, std::chrono::seconds(240), {"OMP_NUM_THREADS=1"});
  if (expect_ok) {
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  return r;
}

// The synthetic MLP, small learning rate so 20 steps stay far from convergence.
std::vector<std::string> mlp_sets(const std::string& dir, int batch, int accum = 1) {
  return {"run.output_dir=" + dir,       "train.max_steps=20",   "train.batch_size=" + std::to_string(batch),
          "train.grad_accum_steps=" + std::to_string(accum), "optim.lr=0.01", "data.eval_split=none",
          "checkpoint.every_epochs=0",   "train.log_every=5"};
}

std::vector<std::map<std::string, double>> read_metrics(const std::string& path) {
  std::vector<std::map<std::string, double>> records;
  std::ifstream in(path);
  std::string line;
  std::regex field("\"([a-z_]+)\": ([-0-9.e+]+)");
  while (std::getline(in, line)) {
    std::map<std::string, double> record;
    for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it)
      record[(*it)[1]] = std::stod((*it)[2]);
    records.push_back(record);
  }
  return records;
}

}  // namespace

TEST_CASE("world 2 with batch b equals world 1 with batch 2b after 20 SGD steps", "[trainer]") {
  TempDir dir;
  train(2, "synthetic_mlp.yaml", mlp_sets(dir.file("w2"), 16));
  train(1, "synthetic_mlp.yaml", mlp_sets(dir.file("w1"), 32));
  train(1, "synthetic_mlp.yaml", mlp_sets(dir.file("w1_small"), 16));
  auto w2 = load_weights(dir.file("w2/model.pt"));
  CHECK(max_difference(w2, load_weights(dir.file("w1/model.pt"))) < 1e-5);
  // The comparison can fail: a different global batch ends elsewhere.
  CHECK(max_difference(w2, load_weights(dir.file("w1_small/model.pt"))) > 1e-4);
}

TEST_CASE("train.precision bf16 trains under autocast: near float32's weights, not equal, kept in float32",
          "[trainer][precision]") {
  TempDir dir;
  train(2, "synthetic_mlp.yaml", mlp_sets(dir.file("fp32"), 16));
  auto sets = mlp_sets(dir.file("bf16"), 16);
  sets.push_back("train.precision=bf16");
  auto r = train(2, "synthetic_mlp.yaml", sets);
  auto fp32 = load_weights(dir.file("fp32/model.pt"));
  auto bf16 = load_weights(dir.file("bf16/model.pt"));
  for (const auto& [name, tensor] : bf16) CHECK(tensor.scalar_type() == torch::kFloat);
  // The products ran in bfloat16 (8 bits of mantissa): the weights move a little, and not at all if
  // autocast did nothing.
  double difference = max_difference(fp32, bf16);
  CHECK(difference > 1e-5);
  CHECK(difference < 2e-2);
  CHECK_THAT(read_file(dir.file("bf16/config.yaml")), Contains("precision: bf16"));
}

TEST_CASE("gradient accumulation: world 2, batch b, 2 micro-steps equals world 1 with batch 4b", "[trainer]") {
  TempDir dir;
  train(2, "synthetic_mlp.yaml", mlp_sets(dir.file("accum"), 8, 2));
  train(1, "synthetic_mlp.yaml", mlp_sets(dir.file("w1"), 32));
  CHECK(max_difference(load_weights(dir.file("accum/model.pt")), load_weights(dir.file("w1/model.pt"))) < 1e-5);
}

TEST_CASE("train.global_batch_size: worlds 1, 2 and 3 take the same steps, and a run resumes at another world size",
          "[trainer][elastic]") {
  TempDir dir;
  // 12 samples a step, micro-batches of at most 4: 1 × 4 × 3 micro-steps, 2 × 3 × 2, 3 × 4 × 1.
  auto sets = [&](const std::string& out, int steps) {
    auto s = mlp_sets(dir.file(out), 4);
    s.insert(s.end(), {"train.global_batch_size=12", "train.max_steps=" + std::to_string(steps),
                       "checkpoint.every_steps=5"});
    return s;
  };
  train(1, "synthetic_mlp.yaml", sets("w1", 20));
  auto w3 = train(3, "synthetic_mlp.yaml", sets("w3", 20));
  CHECK_THAT(w3.err + w3.out, Contains("global batch 12 = 3 rank(s) × batch 4 × 1 micro-step(s) a step (train.global_batch_size)"));
  train(2, "synthetic_mlp.yaml", sets("w2", 20));
  auto w1 = load_weights(dir.file("w1/model.pt"));
  CHECK(max_difference(load_weights(dir.file("w2/model.pt")), w1) < 1e-5);
  CHECK(max_difference(load_weights(dir.file("w3/model.pt")), w1) < 1e-5);
  // 10 steps at world 3, the other 10 at world 2 (6 samples a rank: 2 micro-steps of 3).
  train(3, "synthetic_mlp.yaml", sets("moved", 10));
  auto resumed = train(2, "synthetic_mlp.yaml", sets("moved", 20));
  CHECK_THAT(resumed.err + resumed.out,
             Contains("written by 3 replicas of batch 4: the same 12 samples per step") && !Contains("BatchNorm"));
  CHECK(max_difference(load_weights(dir.file("moved/model.pt")), w1) < 1e-5);
  // The same with sharded optimizer state and sharded checkpoints: the shards are taken apart anew.
  auto sharded = [&](const std::string& out, int steps) {
    auto s = sets(out, steps);
    s.insert(s.end(), {"dist.shard=optimizer", "checkpoint.format=sharded"});
    return s;
  };
  train(3, "synthetic_mlp.yaml", sharded("moved_shards", 10));
  auto reshard = train(2, "synthetic_mlp.yaml", sharded("moved_shards", 20));
  CHECK_THAT(reshard.err + reshard.out, Contains("written by 3 replicas of batch 4: the same 12 samples per step"));
  CHECK(max_difference(load_weights(dir.file("moved_shards/model.pt")), w1) < 1e-5);
  // The comparison can fail: 8 samples a step end elsewhere.
  auto other = sets("g8", 20);
  other.push_back("train.global_batch_size=8");
  train(2, "synthetic_mlp.yaml", other);
  CHECK(max_difference(load_weights(dir.file("g8/model.pt")), w1) > 1e-4);
  // A world size that cannot share it is refused before any step, naming the ones that can.
  auto refused = train(5, "synthetic_mlp.yaml", sets("w5", 20), /*expect_ok=*/false);
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Contains("train.global_batch_size: 12 samples do not split evenly over 5 ranks"));
  CHECK_THAT(refused.err, Contains("(1, 2, 3, 4, 6, 12)"));
  CHECK_FALSE(std::filesystem::exists(dir.file("w5")));
}

TEST_CASE("the ConvNet with SyncBatchNorm: world 2 with batch 32 equals world 1 with batch 64 after 30 SGD steps",
          "[trainer][syncbn]") {
  TempDir dir;
  auto sets = [&](const std::string& out, int batch, bool sync) {
    auto s = mlp_sets(dir.file(out), batch);
    s.insert(s.end(), {"model.name=convnet", "model.batchnorm=true", "train.max_steps=30",
                       std::string("model.sync_batchnorm=") + (sync ? "true" : "false")});
    return s;
  };
  // The same config at both world sizes; only the per-rank batch differs.
  train(2, "synthetic_mlp.yaml", sets("w2", 32, true));
  train(1, "synthetic_mlp.yaml", sets("w1", 64, true));
  train(1, "synthetic_mlp.yaml", sets("w1_plain", 64, false));
  train(2, "synthetic_mlp.yaml", sets("w2_local", 32, false));
  auto w1 = load_weights(dir.file("w1/model.pt"));
  CHECK(max_difference(load_weights(dir.file("w2/model.pt")), w1) < 1e-5);  // running statistics included
  // At world 1 it is BatchNorm, up to float rounding (BatchNorm's own running mean sums less exactly).
  CHECK(max_difference(load_weights(dir.file("w1_plain/model.pt")), w1) < 1e-4);
  // The comparison can fail: per-rank statistics of 32 samples end elsewhere.
  CHECK(max_difference(load_weights(dir.file("w2_local/model.pt")), w1) > 1e-3);
  // So a resume that groups a step's samples otherwise says that it trains otherwise (was: "the same
  // 64 samples per step", and nothing more).
  auto resumable = [&](const std::string& out, int batch, int steps, bool sync) {
    auto s = sets(out, batch, sync);
    s.insert(s.end(), {"train.max_steps=" + std::to_string(steps), "checkpoint.every_steps=2"});
    return s;
  };
  train(2, "synthetic_mlp.yaml", resumable("moved", 32, 2, false));
  auto moved = train(1, "synthetic_mlp.yaml", resumable("moved", 64, 3, false));
  CHECK_THAT(moved.out + moved.err,
             Contains("normalises each micro-batch by its own statistics (BatchNorm), and this run groups the samples "
                      "of a step otherwise than the checkpoint's run (2 replica(s) × batch 32 × 1 micro-step(s), now "
                      "1 × 64 × 1)"));
  // SyncBatchNorm's statistics are the replicas' together: 2 × 32 and 1 × 64 group alike, unsaid.
  train(2, "synthetic_mlp.yaml", resumable("moved_sync", 32, 2, true));
  auto moved_sync = train(1, "synthetic_mlp.yaml", resumable("moved_sync", 64, 3, true));
  CHECK_THAT(moved_sync.out + moved_sync.err, Contains("resumed from") && !Contains("BatchNorm"));
}

TEST_CASE("overlapping all-reduce with backward gives the same weights as not overlapping", "[trainer]") {
  TempDir dir;
  // Small buckets, so several of them start during backward.
  auto sets = [&](const std::string& out, const std::string& overlap) {
    auto s = mlp_sets(dir.file(out), 16);
    s.insert(s.end(), {"model.hidden=[256,256]", "dist.bucket_cap_mb=0.05", "dist.overlap=" + overlap});
    return s;
  };
  train(2, "synthetic_mlp.yaml", sets("overlap", "true"));
  train(2, "synthetic_mlp.yaml", sets("sync", "false"));
  CHECK(max_difference(load_weights(dir.file("overlap/model.pt")), load_weights(dir.file("sync/model.pt"))) < 1e-6);
  auto logs = read_metrics(dir.file("overlap/metrics.jsonl"));
  double total = 0, exposed = 0;
  for (const auto& record : logs)
    if (record.count("allreduce_ms")) {
      total += record.at("allreduce_ms");
      exposed += record.at("allreduce_exposed_ms");
    }
  CHECK(total > 0);
  CHECK(exposed < total);  // some of it ran while backward did
}

TEST_CASE("10 steps, stop, resume, 10 more equals 20 steps straight", "[trainer][checkpoint]") {
  TempDir dir;
  auto sets = [&](const std::string& out, int steps) {
    auto s = mlp_sets(dir.file(out), 16);
    s[1] = "train.max_steps=" + std::to_string(steps);
    s.push_back("checkpoint.every_steps=10");
    return s;
  };
  train(2, "synthetic_mlp.yaml", sets("straight", 20));
  train(2, "synthetic_mlp.yaml", sets("resumed", 10));
  CHECK(std::filesystem::exists(dir.file("resumed/checkpoints/step_0000000010.json")));
  auto second = train(2, "synthetic_mlp.yaml", sets("resumed", 20));
  CHECK_THAT(second.out, Contains("resumed from") && Contains("at step 10"));
  CHECK(bit_identical(load_weights(dir.file("straight/model.pt")), load_weights(dir.file("resumed/model.pt"))));
}

TEST_CASE("a cosine run stopped at step 6 and resumed with train.max_steps 12 and schedule.decay_steps 9 has the "
          "uninterrupted run's learning rate at every step, and without decay_steps the resume says the lr goes up",
          "[trainer][checkpoint][schedule]") {
  TempDir dir;
  auto sets = [&](const std::string& out, int steps, int decay_steps) {
    auto s = mlp_sets(dir.file(out), 16);
    s[1] = "train.max_steps=" + std::to_string(steps);
    s.insert(s.end(), {"train.log_every=1", "checkpoint.every_steps=6", "schedule.name=cosine",
                       "schedule.warmup_steps=2", "schedule.min_lr=0.001",
                       "schedule.decay_steps=" + std::to_string(decay_steps)});
    return s;
  };
  auto lr_by_step = [&](const std::string& out) {
    std::map<int64_t, double> lrs;
    for (const auto& record : read_metrics(dir.file(out + "/metrics.jsonl")))
      if (record.count("lr") && record.count("step")) lrs[static_cast<int64_t>(record.at("step"))] = record.at("lr");
    return lrs;
  };
  train(1, "synthetic_mlp.yaml", sets("straight", 12, 9));
  train(1, "synthetic_mlp.yaml", sets("resumed", 6, 9));
  auto second = train(1, "synthetic_mlp.yaml", sets("resumed", 12, 9));
  CHECK_THAT(second.out, Contains("at step 6"));
  CHECK_THAT(second.err + second.out, !Contains("goes back up"));
  const auto straight = lr_by_step("straight"), resumed = lr_by_step("resumed");
  CHECK(straight.size() == 12);
  CHECK(resumed == straight);
  CHECK(straight.at(12) == Approx(0.001).epsilon(1e-9));  // at min_lr from decay_steps on
  CHECK(bit_identical(load_weights(dir.file("straight/model.pt")), load_weights(dir.file("resumed/model.pt"))));

  // Without decay_steps the cosine spans each run's own max_steps: 6, then 12, so step 7's lr is
  // higher than step 6's, and the resume says so, naming the key that keeps the saved decay.
  train(1, "synthetic_mlp.yaml", sets("stretched", 6, 0));
  auto stretched = train(1, "synthetic_mlp.yaml", sets("stretched", 12, 0));
  CHECK_THAT(stretched.err + stretched.out,
             Contains("the learning rate goes back up on resume: step 6 had") && Contains("schedule.decay_steps"));
  // A run that ended by epochs had no train.max_steps to copy: the advice says what its end was.
  CHECK_THAT(stretched.err + stretched.out,
             Contains("its train.max_steps; or, run by epochs, its train.epochs times "));
  // Its decay had ended at step 6: the advice says what keeping an ended decay means.
  CHECK_THAT(stretched.err + stretched.out,
             Contains("If the saved run had finished, its decay had ended there, and every added step would train at "
                      "schedule.min_lr 0.001"));
  const auto lrs = lr_by_step("stretched");
  CHECK(lrs.at(7) > lrs.at(6));

  // Following that advice: schedule.decay_steps may change on resume, and the cosine stays ended.
  train(1, "synthetic_mlp.yaml", sets("kept", 6, 0));
  auto kept = train(1, "synthetic_mlp.yaml", sets("kept", 12, 6));
  CHECK_THAT(kept.out, Contains("changed since that run: ") && Contains("schedule.decay_steps 0 → 6"));
  CHECK_THAT(kept.err + kept.out, !Contains("goes back up"));
  for (const auto& [step, lr] : lr_by_step("kept"))
    if (step > 6) CHECK(lr == Approx(0.001).epsilon(1e-9));
}

TEST_CASE("the log's numbers mean what they say: no all-reduce time at world 1, the closing rate without the "
          "evaluation, and a resume's batch out of its epoch's",
          "[trainer][log]") {
  TempDir dir;
  // 2048 samples in batches of 16: 128 an epoch; stopped at step 10, resumed to 20 by 2 ranks of
  // batch 8 (the same samples a step), whose 1024 samples each are 128 batches too.
  auto sets = [&](int steps, int batch) {
    auto s = mlp_sets(dir.file("run"), batch);
    s[1] = "train.max_steps=" + std::to_string(steps);
    s.insert(s.end(), {"checkpoint.every_steps=10", "data.eval_split=test"});
    return s;
  };
  auto first = train(1, "synthetic_mlp.yaml", sets(10, 16));
  CHECK_THAT(first.out, Contains("step 5/10 loss") && !Contains("all-reduce"));
  for (const auto& record : read_metrics(dir.file("run/metrics.jsonl"))) CHECK(record.count("allreduce_ms") == 0);
  // A run shorter than train.log_every still logs its training loss, once, at its end.
  auto short_run = train(1, "synthetic_mlp.yaml", {"run.output_dir=" + dir.file("short"), "train.max_steps=3",
                                                   "train.log_every=50", "data.eval_split=none",
                                                   "checkpoint.every_epochs=0"});
  CHECK(std::regex_search(short_run.out, std::regex(R"(step 3/3 loss [0-9.]+)")));
  CHECK(read_metrics(dir.file("short/metrics.jsonl")).size() > 0);
  CHECK(std::regex_search(first.out, std::regex(R"(done: 10 steps in [0-9.]+ s \([0-9.]+ steps/s besides [0-9.]+ s of evaluation\))")));
  auto second = train(2, "synthetic_mlp.yaml", sets(20, 8));
  CHECK_THAT(second.out, Contains("at step 10 (in epoch 1, after 10 of its 128 batches)") &&
                             Contains("written by 1 replica of batch 16: the same 16 samples per step") &&
                             Contains("all-reduce"));
}

TEST_CASE("ddp-train names the option a mistyped one meant, and a key=value given without --set", "[trainer]") {
  auto mistyped = run_command({bin("ddp-train"), config("synthetic_mlp.yaml"), "--sett", "train.epochs=1"});
  CHECK(mistyped.exit_code == 2);
  CHECK_THAT(mistyped.err, Contains("error: unknown option --sett (did you mean --set?); see ddp-train --help"));
  auto bare = run_command({bin("ddp-train"), config("synthetic_mlp.yaml"), "train.epochs=1"});
  CHECK(bare.exit_code == 2);
  CHECK_THAT(bare.err, Contains("error: unexpected argument train.epochs=1: a config key is set with --set "
                                "train.epochs=1; see ddp-train --help"));
}

TEST_CASE("ranks started by hand in reverse order train like ddprun's", "[trainer]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  auto sets = mlp_sets(dir.file("by_hand"), 16);
  std::string overrides;
  for (const auto& s : sets) overrides += " --set " + s;
  std::string worker = "OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + config("synthetic_mlp.yaml") + overrides +
                       " --world-size 2 --master-port " + port;
  auto r = run_shell(worker + " --rank 1 & B=$!; sleep 1; " + worker + " --rank 0; A=$?; wait $B; echo statuses=$A,$?",
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(count_lines(r.out, "statuses=0,0") == 1);
  train(2, "synthetic_mlp.yaml", mlp_sets(dir.file("launched"), 16));
  CHECK(bit_identical(load_weights(dir.file("by_hand/model.pt")), load_weights(dir.file("launched/model.pt"))));
}

TEST_CASE("Slurm tasks without a launcher (mode B) train like ddprun's ranks", "[trainer][slurm]") {
  TempDir dir;
  auto sets = mlp_sets(dir.file("tasks"), 16);
  std::string overrides;
  for (const auto& s : sets) overrides += " --set " + s;
  // What srun --ntasks=2 --ntasks-per-node=2 sets for each task (MASTER_PORT: a port free here).
  std::string slurm = "SLURM_JOB_ID=777 SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE=2 "
                      "SLURM_STEP_NODELIST=localhost MASTER_PORT=" + std::to_string(free_port()) + " OMP_NUM_THREADS=1 ";
  std::string task = bin("ddp-train") + " " + config("synthetic_mlp.yaml") + overrides;
  auto r = run_shell(slurm + "SLURM_PROCID=1 SLURM_LOCALID=1 " + task + " & B=$!; " + slurm +
                         "SLURM_PROCID=0 SLURM_LOCALID=0 " + task + "; A=$?; wait $B; echo statuses=$A,$?",
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(count_lines(r.out, "statuses=0,0") == 1);
  CHECK_THAT(r.out, Contains("world size 2"));
  train(2, "synthetic_mlp.yaml", mlp_sets(dir.file("launched"), 16));
  CHECK(bit_identical(load_weights(dir.file("tasks/model.pt")), load_weights(dir.file("launched/model.pt"))));
}

TEST_CASE("a short 2-rank Fashion-MNIST run learns, and its model.pt gives the same accuracy in Python", "[trainer][slow]") {
  TempDir dir;
  train(2, "fashion_mnist_convnet.yaml",
        {"run.output_dir=" + dir.file("w2"), "train.max_steps=150", "checkpoint.every_epochs=0", "train.log_every=50"});
  auto metrics = read_metrics(dir.file("w2/metrics.jsonl"));
  auto with = [&](const std::string& key) {
    std::vector<std::map<std::string, double>> found;
    for (const auto& record : metrics)
      if (record.count(key)) found.push_back(record);
    return found;
  };
  auto evals = with("eval_accuracy");
  REQUIRE(evals.size() >= 2);
  const auto& first = evals.front();
  const auto& last = evals.back();
  CHECK(first.at("step") == 0);
  CHECK(last.at("step") == 150);
  CHECK(last.at("eval_accuracy") > 0.75);
  CHECK(last.at("eval_accuracy") > first.at("eval_accuracy") + 0.4);
  auto logs = with("samples_per_s");
  REQUIRE(logs.size() == 3);
  for (const char* key : {"step", "epoch", "loss", "lr", "samples_per_s_per_rank", "allreduce_ms"})
    CHECK(logs[0].count(key) == 1);
  CHECK(with("peak_rss_mib_max").size() == 1);
  CHECK_THAT(read_file(dir.file("w2/config.yaml")), Contains("max_steps: 150"));

  // One rank with the same global batch: the same eval before training, and it learns as far.
  train(1, "fashion_mnist_convnet.yaml",
        {"run.output_dir=" + dir.file("w1"), "train.max_steps=150", "train.batch_size=128", "checkpoint.every_epochs=0",
         "train.log_every=50"});
  auto single = read_metrics(dir.file("w1/metrics.jsonl"));
  REQUIRE(single.front().count("eval_accuracy") == 1);
  CHECK(single.front().at("eval_accuracy") == first.at("eval_accuracy"));
  CHECK(single.front().at("eval_loss") == Approx(first.at("eval_loss")).epsilon(1e-6));
  double single_final = 0;
  for (const auto& record : single)
    if (record.count("eval_accuracy")) single_final = record.at("eval_accuracy");
  CHECK(single_final == Approx(last.at("eval_accuracy")).margin(0.02));

  auto python = run_command({"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/scripts/ddp_models.py", "eval",
                             dir.file("w2/model.pt"), "convnet"},
                            std::chrono::seconds(120));
  INFO(python.err);
  REQUIRE(python.exit_code == 0);
  std::smatch match;
  REQUIRE(std::regex_search(python.out, match, std::regex("accuracy ([0-9.]+)")));
  CHECK(std::stod(match[1]) == Approx(last.at("eval_accuracy")).margin(1e-4));
}

TEST_CASE("a config typo fails before any work, naming the key and the fix", "[trainer][errors]") {
  TempDir dir;
  write_file(dir.file("typo.yaml"), "train: {bach_size: 32}\nrun: {output_dir: " + dir.file("out") + "}\n");
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2", dir.file("typo.yaml")});
  CHECK(r.exit_code == 2);
  // Where it is, as a compiler says it: the file, line 1, the key's column.
  CHECK_THAT(r.err, Contains(dir.file("typo.yaml") + ":1:9: train.bach_size: unknown key (did you mean train.batch_size?)"));
  CHECK_FALSE(std::filesystem::exists(dir.file("out")));
}

TEST_CASE("mesh sizes that do not multiply to the world size fail on every rank, naming the keys", "[trainer][errors]") {
  TempDir dir;
  auto r = train(2, "synthetic_mlp.yaml", {"dist.data_replicate=4", "run.output_dir=" + dir.file("out")}, false);
  CHECK(r.exit_code == 2);
  // Every rank finds it; the console shows it once (Note [One usage error]).
  CHECK_THAT(r.err, Contains(": error: dist.pipeline, dist.data_replicate, dist.data_shard: dist.pipeline 1 × "
                             "dist.data_shard 1 × dist.data_replicate 4 = 4 ranks, but the world size is 2"));
  CHECK(r.err.find("error: dist.pipeline") == r.err.rfind("error: dist.pipeline"));
  CHECK_FALSE(std::filesystem::exists(dir.file("out")));
}

TEST_CASE("drop_last with fewer samples than ranks is an error, not zero steps and exit 0", "[trainer][errors]") {
  TempDir dir;
  auto r = train(2, "synthetic_mlp.yaml",
                 {"data.synthetic_train_samples=1", "sampler.drop_last=true", "run.output_dir=" + dir.file("out")}, false);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("sampler.drop_last: the 1 training samples leave none for each of 2 ranks"));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/model.pt")));
  // sampler.split: chunk drops the remainder whatever drop_last says: the message names it.
  auto chunk = train(2, "synthetic_mlp.yaml",
                     {"data.synthetic_train_samples=1", "sampler.split=chunk", "run.output_dir=" + dir.file("chunk")},
                     false);
  CHECK(chunk.exit_code == 2);
  CHECK_THAT(chunk.err, Contains("sampler.split: chunk: the 1 training samples leave none for each of 2 ranks; use "
                                 "fewer ranks or sampler.split: distributed (which repeats some to fill up)"));
}

TEST_CASE("a truncated data file is one clear error naming it", "[trainer][errors]") {
  TempDir dir;
  std::string source = "/usr/share/datasets/fashion-mnist/";
  for (const char* name : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    std::filesystem::copy_file(source + name, dir.file(name));
  std::string images = read_file(source + "train-images-idx3-ubyte.gz");
  write_file(dir.file("train-images-idx3-ubyte.gz"), images.substr(0, images.size() / 2));
  auto r = train(2, "fashion_mnist_convnet.yaml", {"data.path=" + dir.path(), "run.output_dir=" + dir.file("out")}, false);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("train-images-idx3-ubyte.gz") && Contains("truncated"));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/model.pt")));
}

TEST_CASE("ranks with different configs fail together, naming the rank and the difference", "[trainer][errors]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  std::string worker = bin("ddp-train") + " " + config("synthetic_mlp.yaml") + " --set run.output_dir=" + dir.path() +
                       " --world-size 2 --master-port " + port;
  auto r = run_shell(worker + " --rank 0 --set train.batch_size=32 & A=$!; " + worker +
                         " --rank 1 --set train.batch_size=16; B=$?; wait $A; echo statuses=$?,$B",
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "statuses=2,2") == 1);
  CHECK_THAT(r.err, Contains("rank 1's config differs from rank 0's: train.batch_size 16 (rank 0: 32)"));
}

namespace {

// Local addresses of the listening TCP sockets that `pids` hold, as hex from /proc/net/tcp{,6}.
std::vector<std::string> listening_addresses(const std::vector<int>& pids) {
  std::set<std::string> inodes;
  for (int pid : pids) {
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      auto target = std::filesystem::read_symlink(fd.path(), ec).string();
      if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::vector<std::string> addresses;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, skip, inode;
      fields >> slot >> local >> remote >> state;
      for (int i = 0; i < 5; ++i) fields >> skip;
      fields >> inode;
      if (state == "0A" && inodes.count(inode)) addresses.push_back(local.substr(0, local.find(':')));
    }
  }
  return addresses;
}

bool is_loopback_hex(const std::string& hex) {
  if (hex.size() == 8) return hex.substr(6, 2) == "7F";  // 127.x.x.x, little-endian
  return hex == "00000000000000000000000001000000" ||                   // ::1
         (hex.substr(0, 24) == "0000000000000000FFFF0000" && hex.substr(30, 2) == "7F");  // ::ffff:127.x
}

}  // namespace

TEST_CASE("a single-node trainer run listens on loopback only", "[trainer][exposure]") {
  TempDir dir;
  std::string out = dir.file("run");
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                        config("fashion_mnist_convnet.yaml") + " --set run.output_dir=" + out +
                        " --set train.max_steps=100000 --set data.eval_split=none --set train.log_every=5";
  auto r = run_shell(command + " > " + dir.file("log") + " 2>&1 & L=$!; " +
                         until_true("[ -s " + out + "/metrics.jsonl ]", 90) +
                         "pgrep -f "
                         "'[d]dp-train.*" +
                         out + "'; echo launcher $L",
                     std::chrono::seconds(120));
  std::vector<int> pids;
  int launcher = 0;
  std::istringstream lines(r.out);
  std::string word;
  while (lines >> word)
    word == "launcher" ? void(lines >> launcher) : pids.push_back(std::stoi(word));
  // The run's 100000 steps end with the test, whichever check stops it: its watchdog takes the
  // workers down with the launcher.
  struct KillAtEnd {
    int pid;
    ~KillAtEnd() {
      if (pid > 0) kill(pid, SIGKILL);
    }
  } stop{launcher};
  pids.push_back(launcher);
  REQUIRE(pids.size() == 3);  // two workers and the launcher
  // A control: this test's own socket on every interface must be seen and flagged.
  int control = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  bind(control, reinterpret_cast<sockaddr*>(&any), sizeof any);
  listen(control, 1);
  pids.push_back(getpid());
  auto addresses = listening_addresses(pids);
  close(control);
  REQUIRE(std::count(addresses.begin(), addresses.end(), "00000000") == 1);
  int exposed = 0;
  for (const auto& address : addresses) exposed += !is_loopback_hex(address);
  CHECK(exposed == 1);  // the control, nothing of the run
}

TEST_CASE("two nodes of one rank each train exactly like one node of two", "[trainer][multinode]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  std::string overrides;
  for (const auto& s : mlp_sets(dir.file("two_nodes"), 16)) overrides += " --set " + s;
  std::string node = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --nnodes 2 --master-port " + port +
                     " --rdzv-timeout 60 " + config("synthetic_mlp.yaml") + overrides + " --node-rank ";
  auto r = run_shell(node + "1 & B=$!; " + node + "0; A=$?; wait $B; echo statuses=$A,$?", std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(count_lines(r.out, "statuses=0,0") == 1);
  train(2, "synthetic_mlp.yaml", mlp_sets(dir.file("one_node"), 16));
  CHECK(bit_identical(load_weights(dir.file("two_nodes/model.pt")), load_weights(dir.file("one_node/model.pt"))));
}

TEST_CASE("a Python program using torch.distributed's env:// joins ddprun's store", "[trainer][python]") {
  std::string script =
      "import torch, torch.distributed as dist\n"
      "dist.init_process_group('gloo')\n"
      "t = torch.ones(1) * (dist.get_rank() + 1)\n"
      "dist.all_reduce(t)\n"
      "print('rank', dist.get_rank(), 'of', dist.get_world_size(), 'sum', int(t.item()))\n";
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2", "--", "/usr/bin/python3", "-c", script},
                       std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(count_lines(r.out, "[rank 0] rank 0 of 2 sum 3") == 1);
  CHECK(count_lines(r.out, "[rank 1] rank 1 of 2 sum 3") == 1);
}

TEST_CASE("a step reads no tensor value to the host, the loss included (read at log steps only), in micro-steps, "
          "clipped, under ZeRO-3 and in pipeline stages",
          "[trainer][log]") {
  // Each read (item(), a tensor used as a number) is a wait for the device on a GPU (issue 42). The
  // count is the rank that reads most's, over the steps after the first: a pipeline's second stage
  // reads a shape header for each microbatch of the first step, and none after (Note [Shapes
  // between stages]).
  TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"accumulated", {"train.grad_accum_steps=2", "train.clip_grad_norm=0.5"}},
      {"zero3", {"dist.shard=parameters", "train.clip_grad_norm=0.5"}},
      {"stages", {"dist.pipeline=2", "dist.microbatches=4", "train.clip_grad_norm=0.5"}}};
  for (const auto& [name, extra] : runs) {
    auto sets = mlp_sets(dir.file(name), 8);
    sets.insert(sets.end(), extra.begin(), extra.end());
    auto r = train(2, "synthetic_mlp.yaml", sets);
    INFO(name << ":\n" << r.out << r.err);
    CHECK(std::regex_search(r.out, std::regex(R"(step 20/20 loss [0-9]+\.[0-9]+)")));
    CHECK_THAT(r.out, Contains("tensor values read to the host a step, log steps aside: 0.00 on the rank that reads "
                               "most"));
    double reads = -1;
    for (const auto& record : read_metrics(dir.file(name + "/metrics.jsonl")))
      if (record.count("host_reads_per_step")) reads = record.at("host_reads_per_step");
    CHECK(reads == 0);
    CHECK_THAT(r.out, !Contains("peak CUDA memory"));  // no rank on a GPU
  }
}

TEST_CASE("on a GPU: a step at world 1 waits for the device nowhere: no value read, no copy to the host, in "
          "micro-steps, clipped, under ZeRO-3, and the peak CUDA memory is logged and kept",
          "[trainer][log][gpu]") {
  SKIP_WITHOUT_GPU();
  // On a GPU each read or copy to the host leaves the device idle until the host has queued more work.
  TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"accumulated", {"train.grad_accum_steps=2", "train.clip_grad_norm=0.5"}},
      {"zero3", {"dist.shard=parameters", "train.clip_grad_norm=0.5"}}};
  for (const auto& [name, extra] : runs) {
    auto sets = mlp_sets(dir.file(name), 8);
    sets.insert(sets.end(), extra.begin(), extra.end());
    sets.push_back("dist.device=cuda");
    auto r = train(1, "synthetic_mlp.yaml", sets);
    INFO(name << ":\n" << r.out << r.err);
    CHECK_THAT(r.out, Contains("tensor values read to the host a step, log steps aside: 0.00 on the rank that reads "
                               "most"));
    CHECK_THAT(r.out, Contains("peak CUDA memory per rank (MiB, the most the caching allocator had handed out): "));
    double peak = -1;
    for (const auto& record : read_metrics(dir.file(name + "/metrics.jsonl")))
      if (record.count("peak_cuda_mib_max")) peak = record.at("peak_cuda_mib_max");
    CHECK(peak > 0);
  }
}

}  // namespace DDP_TEST_FILE
