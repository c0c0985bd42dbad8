// Note [Re-running a run]: a config run again over its own run directory resumes only what fits
// it, says so, and never overwrites a finished run's outputs with a no-op.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/loop/prior_run.h"
#include "support/subprocess.h"

using namespace ddp::test;
using Catch::Contains;

namespace {

CommandResult train(const std::string& dir, std::vector<std::string> sets) {
  std::vector<std::string> argv{bin("ddprun"), "--standalone", "--nproc-per-node", "2",
                                std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml"};
  std::vector<std::string> base = {"run.output_dir=" + dir, "train.max_steps=10", "checkpoint.every_steps=5",
                                   "data.eval_split=none", "train.log_every=5"};
  base.insert(base.end(), sets.begin(), sets.end());
  for (const auto& s : base) argv.insert(argv.end(), {"--set", s});
  return run_command(argv, std::chrono::seconds(120), {"OMP_NUM_THREADS=1"});
}

}  // namespace

TEST_CASE("a finished run run again does nothing, says so once, and leaves its outputs byte-identical",
          "[trainer][rerun]") {
  TempDir dir;
  std::string run = dir.file("run");
  auto first = train(run, {});
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  std::string metrics = read_file(run + "/metrics.jsonl"), report = read_file(run + "/report.html");
  std::string config = read_file(run + "/config.yaml"), model = read_file(run + "/model.pt");
  auto again = train(run, {"monitor.every_s=7"});  // a key that only steers the run changes nothing here
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  std::string all = again.out + again.err;
  std::size_t said = 0;
  for (auto at = all.find("already finished"); at != std::string::npos; at = all.find("already finished", at + 1)) ++said;
  CHECK(said == 1);  // rank 0 alone says it
  CHECK_THAT(again.out, Contains("run " + run + " already finished at step 10; nothing to do. Its outputs: " + run +
                                 " (model.pt, report.html, metrics.jsonl). To train again: --set run.name=NEW for a "
                                 "new run beside it, or remove " + run + " first"));
  CHECK_THAT(again.out, !Contains("resolved config") && !Contains("step 5/"));
  CHECK(read_file(run + "/metrics.jsonl") == metrics);
  CHECK(read_file(run + "/report.html") == report);
  CHECK(read_file(run + "/config.yaml") == config);
  CHECK(read_file(run + "/model.pt") == model);
}

TEST_CASE("resuming with a config that changes what is trained is refused, naming the key and the ways out",
          "[trainer][rerun][errors]") {
  TempDir dir;
  std::string run = dir.file("run");
  // Stopped at step 5 of 10 (max_steps 5 here, 10 below): a checkpoint to resume from, not finished.
  auto first = train(run, {"train.max_steps=5"});
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  std::string metrics = read_file(run + "/metrics.jsonl");
  auto changed = train(run, {"model.hidden=[32]", "optim.lr=0.1"});
  INFO(changed.out << changed.err);
  CHECK(changed.exit_code == 2);
  CHECK_THAT(changed.err, Contains(run + " holds a run of another config (model.hidden [64] → [32], optim.lr 0.05 → "
                                         "0.1), which its checkpoints do not fit. Start a new run beside it with --set "
                                         "run.name=NEW (or run.output_dir), or remove " + run + " to start this one "
                                         "afresh; or resume it with model.hidden, optim.lr as before"));
  CHECK(read_file(run + "/metrics.jsonl") == metrics);
  // The directory still holds the first run's config: resuming with it works, and so does a new run.
  auto resumed = train(run, {});
  INFO(resumed.out << resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("resumed from") && Contains("at step 5"));
  auto beside = train(dir.file("other"), {"model.hidden=[32]"});
  CHECK(beside.exit_code == 0);
}

TEST_CASE("keys that only steer a run change on resume, and the resume line names them", "[trainer][rerun]") {
  TempDir dir;
  std::string run = dir.file("run");
  REQUIRE(train(run, {"train.max_steps=5"}).exit_code == 0);
  auto longer = train(run, {"train.max_steps=10", "train.log_every=2"});
  INFO(longer.out << longer.err);
  CHECK(longer.exit_code == 0);
  CHECK_THAT(longer.out, Contains("resumed from") && Contains("at step 5") &&
                             Contains("; changed since that run: train.log_every 5 → 2, train.max_steps 5 → 10"));
}

TEST_CASE("config changes are found key by key, and only steering keys may change on resume", "[trainer][rerun]") {
  auto changes = ddp::config_changes("# ddprun\nmodel:\n  hidden: [256, 128]\n  name: mlp\ntrain:\n  epochs: 3\n",
                                     "model:\n  hidden: [32]\n  name: mlp\ntrain:\n  epochs: 5\nnew:\n  key: 1\n");
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].key == "model.hidden");
  CHECK(changes[0].before == "[256, 128]");
  CHECK(changes[0].after == "[32]");
  CHECK(changes[1].key == "train.epochs");
  for (const char* key : {"train.epochs", "train.max_steps", "eval.every_steps", "checkpoint.keep_last", "dist.shard",
                          "logging.report", "train.batch_size", "data.workers"})
    CHECK(ddp::may_change_on_resume(key));
  for (const char* key : {"model.hidden", "optim.lr", "data.path", "train.precision", "sampler.seed", "schedule.name"})
    CHECK_FALSE(ddp::may_change_on_resume(key));
}

TEST_CASE("relative paths: a config's against its own directory, --set's against the current one, and a bad "
          "path is named absolute, once, and leaves no run directory", "[trainer][config]") {
  // Note [Relative paths]: the config sits in cfg/ beside its data (a link to Fashion-MNIST's IDX files)
  // and is run from another directory.
  TempDir dir;
  std::filesystem::create_directories(dir.file("cfg"));
  std::filesystem::create_directories(dir.file("elsewhere"));
  std::filesystem::create_directory_symlink("/usr/share/datasets/fashion-mnist", dir.file("fashion"));
  write_file(dir.file("cfg/train.yaml"),
             "run: {name: relative}\n"
             "data: {dataset: idx, path: ../fashion, cache_dir: none, eval_split: none}\n"
             "model: {name: linear3}\n"
             "train: {max_steps: 3, batch_size: 32, log_every: 1}\n");
  auto run = [&](std::vector<std::string> sets) {
    std::string command = "cd " + dir.file("elsewhere") + " && OMP_NUM_THREADS=1 " + bin("ddprun") +
                          " --standalone --nproc-per-node 2 ../cfg/train.yaml";
    for (const auto& s : sets) command += " --set " + s;
    return run_shell(command, std::chrono::seconds(120));
  };
  auto found = run({});
  INFO(found.out << found.err);
  REQUIRE(found.exit_code == 0);
  CHECK(std::filesystem::exists(dir.file("elsewhere/runs/relative/model.pt")));  // the default: here
  CHECK_THAT(read_file(dir.file("elsewhere/runs/relative/config.yaml")), Contains("path: " + dir.file("fashion")));

  // --set's relative path is the current directory's: elsewhere/fashion does not exist.
  auto missing = run({"run.name=missing", "data.path=fashion"});
  INFO(missing.out << missing.err);
  CHECK(missing.exit_code == 2);
  std::string all = missing.out + missing.err, named = dir.file("elsewhere/fashion");
  CHECK_THAT(all, Contains(named));
  CHECK(all.find(named) == all.rfind(named));  // once on the console
  CHECK_FALSE(std::filesystem::exists(dir.file("elsewhere/runs/missing")));
  CHECK(std::filesystem::exists(dir.file("elsewhere/runs/relative/model.pt")));  // the other run untouched

  // Nothing of a run that fails before its first step stays behind, runs/ included.
  std::filesystem::remove_all(dir.file("elsewhere/runs"));
  auto stub = run({"run.name=stub", "data.path=nowhere"});
  CHECK(stub.exit_code == 2);
  CHECK_FALSE(std::filesystem::exists(dir.file("elsewhere/runs")));
}
