// Note [Re-running a run]: a config run again over its own run directory resumes only what fits
// it, says so, and never overwrites a finished run's outputs with a no-op.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/loop/prior_run.h"
#include "support/subprocess.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

// `fail_at`: DDPRUN_TEST_FAIL_AT_STEP's RANK:STEP, each attempt; `restarts`: ddprun's --max-restarts.
CommandResult train(const std::string& dir, std::vector<std::string> sets, int nproc = 2,
                    const std::string& fail_at = "", int restarts = 0, const std::string& more_env = "") {
  std::vector<std::string> argv{bin("ddprun"), "--standalone", "--nproc-per-node", std::to_string(nproc),
                                "--max-restarts", std::to_string(restarts),
                                std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml"};
  std::vector<std::string> base = {"run.output_dir=" + dir, "train.max_steps=10", "checkpoint.every_steps=5",
                                   "data.eval_split=none", "train.log_every=5"};
  base.insert(base.end(), sets.begin(), sets.end());
  for (const auto& s : base) argv.insert(argv.end(), {"--set", s});
  std::vector<std::string> env{"OMP_NUM_THREADS=1"};
  if (!fail_at.empty()) env.push_back("DDPRUN_TEST_FAIL_AT_STEP=" + fail_at);
  if (!more_env.empty()) env.push_back(more_env);
  return run_command(argv, std::chrono::seconds(120), env);
}

// Stopped at step 5 of 10 with `before`, resumed with `after`: refused with a message holding
// `refusal`; then resumed with `after` and `fix` (what the refusal says to set), it ends at step 10
// within 1e-5 of a run never stopped, having trained the same samples in each step.
void check_refusal_and_fix(std::vector<std::string> before, int nproc_before, std::vector<std::string> after,
                           int nproc_after, const std::string& refusal, const std::string& fix) {
  TempDir dir;
  auto straight = train(dir.file("straight"), before, nproc_before);
  INFO(straight.out << straight.err);
  REQUIRE(straight.exit_code == 0);
  before.push_back("train.max_steps=5");
  auto part = train(dir.file("run"), before, nproc_before);
  INFO(part.out << part.err);
  REQUIRE(part.exit_code == 0);
  auto refused = train(dir.file("run"), after, nproc_after);
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains(refusal) && Contains(fix));
  CHECK_FALSE(std::filesystem::exists(dir.file("run/model.pt.tmp")));
  after.push_back(fix.substr(4, fix.find(' ', 4) - 4) + "=" + fix.substr(fix.find(' ', 4) + 1));  // "use K V" → K=V
  auto fixed = train(dir.file("run"), after, nproc_after);
  INFO(fixed.out << fixed.err);
  REQUIRE(fixed.exit_code == 0);
  CHECK_THAT(fixed.out, Contains("resumed from") && Contains("at step 5"));
  CHECK_THAT(read_file(dir.file("run/metrics.jsonl")), Contains("\"step\": 10,"));
  CHECK(largest_difference(dir.file("straight/model.pt"), dir.file("run/model.pt")) < 1e-5);
}

std::vector<std::string> with_sets(std::vector<std::string> sets, const std::vector<std::string>& more) {
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

}  // namespace

TEST_CASE("dist.microbatches changed on resume cuts the same samples a step otherwise and resumes to the "
          "uninterrupted run's weights, and another train.batch_size is refused, and the fix it names resumes them too",
          "[trainer][rerun][pipeline][errors]") {
  // 2 stages × 1 replica: 2 × train.batch_size 8 = 16 samples a step (Note [Global batch]), as 4
  // microbatches of 4 or 8 of 2.
  TempDir dir;
  std::vector<std::string> four{"dist.pipeline=2", "dist.microbatches=4", "train.batch_size=8"};
  auto straight = train(dir.file("straight"), four);
  INFO(straight.out << straight.err);
  REQUIRE(straight.exit_code == 0);
  CHECK_THAT(straight.out, Contains("global batch 16 = 1 replica(s) of 2 pipeline stages × 4 microbatches of 4 a step"));
  auto part = train(dir.file("run"), with_sets(four, {"train.max_steps=5"}));
  REQUIRE(part.exit_code == 0);
  auto eight = train(dir.file("run"), {"dist.pipeline=2", "dist.microbatches=8", "train.batch_size=8"});
  INFO(eight.out << eight.err);
  REQUIRE(eight.exit_code == 0);
  CHECK_THAT(eight.out, Contains("resumed from") && Contains("at step 5") && Contains("8 microbatches of 2 a step"));
  CHECK(largest_difference(dir.file("straight/model.pt"), dir.file("run/model.pt")) < 1e-5);

  // train.batch_size 4 would make 8 samples a step.
  check_refusal_and_fix({"dist.pipeline=2", "train.batch_size=8"}, 2, {"dist.pipeline=2", "train.batch_size=4"}, 2,
                        "was written by 1 rank(s) × train.batch_size 4 × 4 micro-step(s) = 16 samples a step; this run "
                        "has 1 replica(s) × microbatches of 2 × dist.microbatches 4 = 8, which would train other steps; ",
                        "use train.global_batch_size 16");
}

TEST_CASE("another world size on resume is refused when the samples a step would change, and the fix it names "
          "(counting train.grad_accum_steps) resumes to the uninterrupted run's weights",
          "[trainer][rerun][errors]") {
  // 2 ranks × 16 × 2 micro-steps: 64 samples a step; at world 1 the same batch would make 32.
  check_refusal_and_fix({"train.batch_size=16", "train.grad_accum_steps=2"}, 2,
                        {"train.batch_size=16", "train.grad_accum_steps=2"}, 1,
                        "was written by 2 rank(s) × train.batch_size 16 × 2 micro-step(s) = 64 samples a step; this "
                        "run has 1 × 16 × train.grad_accum_steps 2 = 32",
                        "use train.batch_size 32");
}

TEST_CASE("each checkpoint records the run's config: a re-run without config.yaml, or resuming a named checkpoint "
          "elsewhere, is checked against it, and a finished run's outputs are never overwritten",
          "[trainer][rerun][errors]") {
  TempDir dir;
  std::string run = dir.file("run"), checkpoint = run + "/checkpoints/step_0000000005.json";
  REQUIRE(train(run, {"train.max_steps=5"}).exit_code == 0);
  std::string manifest = read_file(checkpoint);
  CHECK_THAT(manifest, Contains("config: \"") && Contains("lr: 0.05") && Contains("data: \"training samples: 2048"));

  // A named checkpoint, resumed into another run directory with another learning rate.
  auto named = train(dir.file("elsewhere"), {"optim.lr=0.5", "checkpoint.resume=" + checkpoint});
  INFO(named.out << named.err);
  CHECK(named.exit_code == 2);
  CHECK_THAT(named.err, Contains(checkpoint + " was written by a run of another config (optim.lr 0.05 → 0.5), which "
                                 "it does not fit; resume it with optim.lr as before; or start afresh"));
  CHECK_FALSE(std::filesystem::exists(dir.file("elsewhere/config.yaml")));
  // The run's own directory, its config.yaml gone: the checkpoint's record refuses it all the same.
  std::filesystem::remove(run + "/config.yaml");
  auto bare = train(run, {"optim.lr=0.5"});
  INFO(bare.out << bare.err);
  CHECK(bare.exit_code == 2);
  CHECK_THAT(bare.err, Contains(checkpoint + " was written by a run of another config (optim.lr 0.05 → 0.5)"));
  CHECK_FALSE(std::filesystem::exists(run + "/config.yaml"));
  auto same = train(dir.file("copy"), {"checkpoint.resume=" + checkpoint});
  INFO(same.out << same.err);
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.out, Contains("resumed from " + run + "/checkpoints/step_0000000005.pt at step 5"));

  // A finished run: resuming one of its own checkpoints by name would overwrite its outputs.
  std::string done = dir.file("done");
  REQUIRE(train(done, {}).exit_code == 0);
  std::string model = read_file(done + "/model.pt"), metrics = read_file(done + "/metrics.jsonl");
  std::string config = read_file(done + "/config.yaml");
  for (std::vector<std::string> sets : {std::vector<std::string>{}, {"optim.lr=0.5"}}) {
    sets.push_back("checkpoint.resume=" + done + "/checkpoints/step_0000000005.pt");
    auto again = train(done, sets);
    INFO(again.out << again.err);
    CHECK(again.exit_code == 2);
    CHECK_THAT(again.err, Contains(sets.size() == 1 ? "run " + done + " already finished at step 10" : "optim.lr 0.05 → 0.5"));
  }
  CHECK(read_file(done + "/model.pt") == model);
  CHECK(read_file(done + "/metrics.jsonl") == metrics);
  CHECK(read_file(done + "/config.yaml") == config);
}

TEST_CASE("a named checkpoint of an earlier step rewinds the run: the later ones are moved aside, a restart resumes "
          "the new history's newest, resume auto never picks the old one's, and the run ends as one never stopped",
          "[trainer][rerun][faults]") {
  // Note [A named checkpoint rewinds]
  TempDir dir;
  std::string run = dir.file("run"), checkpoints = run + "/checkpoints/";
  std::vector<std::string> twenty{"train.max_steps=20", "checkpoint.keep_last=5"};
  auto straight = train(dir.file("straight"), twenty);
  REQUIRE(straight.exit_code == 0);
  auto first = train(run, twenty, 2, "0:17");  // saves 5, 10 and 15
  REQUIRE(first.exit_code != 0);
  std::string old_ten = read_file(checkpoints + "step_0000000010.pt");
  std::vector<std::string> rewound{"train.max_steps=20", "checkpoint.keep_last=1",
                                   "checkpoint.resume=" + checkpoints + "step_0000000005.json"};
  // Round 0 resumes step 5, saves 10 (keep_last 1 prunes the 5 it named) and fails at 12; round 1
  // resumes that 10, and fails at 12 again.
  auto second = train(run, rewound, 2, "0:12", 1);
  INFO(second.out << second.err);
  CHECK(second.exit_code != 0);
  CHECK_THAT(second.out, Contains("checkpoint.resume rewinds to step 5: the run directory's checkpoints of a later "
                                  "step (15, 10) belong to the history it leaves, and are moved to " + checkpoints +
                                  "superseded-1, where resume: auto never looks"));
  CHECK_THAT(second.out, Contains("round 1 of this job resumes its own newest checkpoint, step 10, not the one that "
                                  "checkpoint.resume names"));
  CHECK_FALSE(std::filesystem::exists(checkpoints + "step_0000000005.json"));
  CHECK_THAT(second.out, Contains("resumed from " + checkpoints + "step_0000000010.pt at step 10"));
  for (const char* moved : {"step_0000000010.json", "step_0000000010.pt", "step_0000000015.json", "step_0000000015.pt"})
    CHECK(std::filesystem::exists(checkpoints + "superseded-1/" + moved));
  CHECK(read_file(checkpoints + "superseded-1/step_0000000010.pt") == old_ten);
  CHECK_FALSE(std::filesystem::exists(checkpoints + "step_0000000015.json"));
  // A run of the same config resumes the new history's newest, not the old one's 15.
  auto last = train(run, twenty);
  INFO(last.out << last.err);
  REQUIRE(last.exit_code == 0);
  CHECK_THAT(last.out, Contains("resumed from " + checkpoints + "step_0000000010.pt at step 10"));
  CHECK(largest_difference(dir.file("straight/model.pt"), run + "/model.pt") < 1e-5);
}

TEST_CASE("a job Slurm requeued (SLURM_RESTART_COUNT) with a named checkpoint resumes its own newest, as a restart "
          "does, not the named one again",
          "[trainer][rerun][faults][slurm]") {
  TempDir dir;
  std::string run = dir.file("run"), checkpoints = run + "/checkpoints/";
  auto first = train(run, {"train.max_steps=20", "checkpoint.keep_last=5"}, 2, "0:12");  // saves 5 and 10
  REQUIRE(first.exit_code != 0);
  const std::vector<std::string> named{"train.max_steps=20", "checkpoint.resume=" + checkpoints + "step_0000000005.json"};
  auto rewound = train(run, named, 2, "0:12");  // rewinds to 5, saves 10 again, fails at 12
  INFO(rewound.out << rewound.err);
  REQUIRE(rewound.exit_code != 0);
  REQUIRE(std::filesystem::exists(checkpoints + "superseded-1/step_0000000010.json"));
  auto requeued = train(run, named, 2, "", 0, "SLURM_RESTART_COUNT=1");
  INFO(requeued.out << requeued.err);
  CHECK(requeued.exit_code == 0);
  CHECK_THAT(requeued.out, Contains("this job's requeue 1 (SLURM_RESTART_COUNT) resumes its own newest checkpoint, "
                                    "step 10, not step 5 that checkpoint.resume names"));
  CHECK_THAT(requeued.out, Contains("resumed from " + checkpoints + "step_0000000010.pt at step 10"));
  CHECK_FALSE(std::filesystem::exists(checkpoints + "superseded-2"));
}

TEST_CASE("a named checkpoint that is refused leaves the run directory's later checkpoints where they were",
          "[trainer][rerun][errors]") {
  // Was: step 10 moved to superseded-1 before the layout check refused step 5, and the next
  // resume: auto went back to step 5, hiding step 10.
  TempDir dir;
  const std::string run = dir.file("run"), checkpoints = dir.file("run/checkpoints/");
  REQUIRE(train(run, {"train.max_steps=20"}, 2, "0:12").exit_code != 0);
  REQUIRE(std::filesystem::exists(checkpoints + "step_0000000010.json"));
  auto refused = train(run, {"train.max_steps=20", "checkpoint.resume=" + checkpoints + "step_0000000005.json"}, 1);
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains("train.batch_size"));
  CHECK(std::filesystem::exists(checkpoints + "step_0000000010.json"));
  CHECK_FALSE(std::filesystem::exists(checkpoints + "superseded-1"));
  // Refused for a train.max_steps behind it: the same.
  auto behind = train(run, {"train.max_steps=3", "checkpoint.resume=" + checkpoints + "step_0000000005.json"});
  INFO(behind.out << behind.err);
  CHECK(behind.exit_code == 2);
  CHECK_THAT(behind.err, Contains("train.max_steps 3 is behind step 5"));
  CHECK(std::filesystem::exists(checkpoints + "step_0000000010.json"));
  CHECK_FALSE(std::filesystem::exists(checkpoints + "superseded-1"));
  auto onwards = train(run, {"train.max_steps=20"});
  INFO(onwards.out << onwards.err);
  CHECK(onwards.exit_code == 0);
  CHECK_THAT(onwards.out, Contains("resumed from " + checkpoints + "step_0000000010."));
}

TEST_CASE("a run resumed with train.max_steps or train.epochs behind its checkpoint is refused, naming both, and its "
          "outputs stay as they were",
          "[trainer][rerun][errors]") {
  TempDir dir;
  // 10 steps (checkpoints at 5 and 10); 2 epochs of synthetic_mlp.yaml's 2,048 samples at batch 32
  // on 2 ranks, 64 steps (a checkpoint at each epoch's end, the last at epoch 2).
  const std::string steps = dir.file("steps"), epochs = dir.file("epochs"), mid = dir.file("mid");
  REQUIRE(train(steps, {}).exit_code == 0);
  REQUIRE(train(epochs, {"train.max_steps=0", "train.epochs=2", "checkpoint.every_steps=0"}).exit_code == 0);
  // 32 steps an epoch: a checkpoint at step 40 is 8 steps into epoch 2, and the run fails at 45.
  const std::vector<std::string> mid_sets{"train.max_steps=0", "train.epochs=2", "checkpoint.every_steps=40"};
  REQUIRE(train(mid, mid_sets, 2, "0:45").exit_code != 0);
  struct Shortened {
    std::string dir, set, message;
  };
  for (const auto& [run, set, message] :
       {Shortened{steps, "train.max_steps=3",
                  "train.max_steps 3 is behind step 10 of the checkpoint it resumes (" + steps +
                      "/checkpoints/step_0000000010.pt): the run has trained past it. To go on, raise train.max_steps "
                      "to 10 or more; to train less, start a new run (another run.output_dir)"},
        // Part-way into epoch 2 (was: "done: 0 steps", and model.pt from step 40 as the 1-epoch run's).
        Shortened{mid, "train.epochs=1",
                  "train.epochs 1 is behind epoch 2 of the checkpoint it resumes (" + mid +
                      "/checkpoints/step_0000000040.pt): the run has trained past it. To go on, raise train.epochs "
                      "to 2 or more"},
        // Finished (its exit recorded): refused before its checkpoint is read, as the end it reached.
        Shortened{epochs, "train.epochs=1",
                  "train.epochs 1 ends before its 2 epochs, at step 64, where run " + epochs +
                      " finished: it has trained "
                      "past it"}}) {
    if (run == steps) {  // as if it crashed after its last checkpoint: no exit recorded, so it resumes
      std::string records = read_file(run + "/metrics.jsonl");
      records.erase(records.rfind("{\"step\": 10, \"exit_status\": 0}\n"));
      write_file(run + "/metrics.jsonl", records);
    }
    const std::string model = read_file(run + "/model.pt"), metrics = read_file(run + "/metrics.jsonl");
    const std::string config = read_file(run + "/config.yaml");
    std::vector<std::string> sets{set};
    if (run == epochs) sets = {"train.max_steps=0", "checkpoint.every_steps=0", set};
    if (run == mid) sets = {"train.max_steps=0", "checkpoint.every_steps=40", set};
    auto shorter = train(run, sets);
    INFO(shorter.out << shorter.err);
    CHECK(shorter.exit_code == 2);
    CHECK_THAT(shorter.err, Contains(message));
    CHECK(read_file(run + "/model.pt") == model);
    CHECK(read_file(run + "/metrics.jsonl") == metrics);
    CHECK(read_file(run + "/config.yaml") == config);
  }
}

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
  CHECK(count_occurrences(all, "already finished") == 1);  // rank 0 alone says it
  CHECK_THAT(again.out, Contains("run " + run + " already finished at step 10; nothing to do. Its outputs: " + run +
                                 " (model.pt, report.html, metrics.jsonl). To train again: --set run.output_dir=NEW_DIR for a "
                                 "new run beside it, or remove " + run + " first"));
  CHECK_THAT(again.out, !Contains("resolved config") && !Contains("step 5/"));
  CHECK(read_file(run + "/metrics.jsonl") == metrics);
  CHECK(read_file(run + "/report.html") == report);
  CHECK(read_file(run + "/config.yaml") == config);
  CHECK(read_file(run + "/model.pt") == model);

  // Shortened below where it finished: a resume of its step-5 checkpoint would end at 8 and replace
  // its model.pt with step 8's. At its own end, or past its epochs' end, it is still finished.
  auto shorter = train(run, {"train.max_steps=8"});
  INFO(shorter.out << shorter.err);
  CHECK(shorter.exit_code == 2);
  CHECK_THAT(shorter.err, Contains("train.max_steps 8 ends before step 10, where run " + run + " finished: it has "
                                   "trained past it"));
  CHECK(read_file(run + "/model.pt") == model);
  CHECK(read_file(run + "/metrics.jsonl") == metrics);
  std::string by_epochs = dir.file("by_epochs");  // 256 samples, 4 steps an epoch at world 2: ends at step 8
  const std::vector<std::string> epochs = {"train.max_steps=0", "data.synthetic_train_samples=256"};
  REQUIRE(train(by_epochs, epochs).exit_code == 0);
  const std::string epochs_model = read_file(by_epochs + "/model.pt");
  auto fewer = train(by_epochs, {"train.max_steps=0", "data.synthetic_train_samples=256", "train.epochs=1"});
  INFO(fewer.out << fewer.err);
  CHECK(fewer.exit_code == 2);
  CHECK_THAT(fewer.err,
             Contains("train.epochs 1 ends before its 2 epochs, at step 8, where run " + by_epochs + " finished"));
  // The same with a train.max_steps at its last step: the epochs still end first (was: "already finished").
  auto capped_fewer = train(by_epochs, {"train.max_steps=8", "data.synthetic_train_samples=256", "train.epochs=1"});
  INFO(capped_fewer.out << capped_fewer.err);
  CHECK(capped_fewer.exit_code == 2);
  CHECK_THAT(capped_fewer.err,
             Contains("train.epochs 1 ends before epoch 2, which that run trained in, at step 8, where "
                      "run " +
                      by_epochs + " finished"));
  auto capped = train(by_epochs, {"train.max_steps=20", "data.synthetic_train_samples=256"});
  INFO(capped.out << capped.err);
  CHECK(capped.exit_code == 0);
  CHECK_THAT(capped.out, Contains("already finished at step 8; nothing to do"));
  CHECK(read_file(by_epochs + "/model.pt") == epochs_model);

  // A config.yaml edited into something that is not a config: another config must not be called
  // finished (nor trained over), since which config ran there can no longer be told.
  for (const char* unreadable : {"optim: [unclosed\n", ""}) {
    write_file(run + "/config.yaml", unreadable);
    auto other = train(run, {"optim.lr=0.5"});
    INFO(other.out << other.err);
    CHECK(other.exit_code == 2);
    CHECK_THAT(other.err, Contains(run + "/config.yaml is not a config that can be read (not YAML, or no map of "
                                         "sections), so whether this config is the run's there cannot be told. Start "
                                         "a new run beside it with --set run.output_dir=NEW_DIR, or remove " + run));
    CHECK(read_file(run + "/model.pt") == model);
    CHECK(read_file(run + "/metrics.jsonl") == metrics);
  }
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
                                         "run.output_dir=NEW_DIR, or remove " + run + " to start this one "
                                         "afresh; or resume it with model.hidden, optim.lr as before"));
  CHECK(read_file(run + "/metrics.jsonl") == metrics);
  // The directory still holds the first run's config: resuming with it works, and so does a new run.
  auto resumed = train(run, {});
  INFO(resumed.out << resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("resumed from") && Contains("at step 5"));
  // The advice names run.output_dir, which this config sets (run.name would change nothing), and works.
  auto beside = train(dir.file("other"), {"model.hidden=[32]"});
  CHECK(beside.exit_code == 0);
}

TEST_CASE("a run with no checkpoint is not trained over by another config, and one of the same config that starts "
          "over says so",
          "[trainer][rerun][errors]") {
  // It used to start afresh without a word: model.pt replaced, another config's records after its own.
  TempDir dir;
  std::string run = dir.file("run");
  auto first = train(run, {"checkpoint.every_steps=0", "checkpoint.every_epochs=0", "train.max_steps=6"});
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  std::error_code missing;
  const bool empty = std::filesystem::is_empty(run + "/checkpoints", missing);
  REQUIRE((empty || missing));
  const std::string metrics = read_file(run + "/metrics.jsonl"), model = read_file(run + "/model.pt");
  auto other = train(run, {"checkpoint.every_steps=0", "checkpoint.every_epochs=0", "train.max_steps=6",
                           "optim.lr=0.1"});
  INFO(other.out << other.err);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains(run + " holds a run of another config (optim.lr 0.05 → 0.1), with no checkpoint. "
                                       "Start a new run beside it with --set run.output_dir=NEW_DIR, or remove " +
                                       run + " to start this one there"));
  CHECK(read_file(run + "/metrics.jsonl") == metrics);
  CHECK(read_file(run + "/model.pt") == model);
  // Lengthened, with nothing to lengthen it from: it starts over, and says so.
  auto longer = train(run, {"checkpoint.every_steps=0", "checkpoint.every_epochs=0", "train.max_steps=8"});
  INFO(longer.out << longer.err);
  CHECK(longer.exit_code == 0);
  CHECK(count_occurrences(longer.out + longer.err,
                          run + " holds an earlier run of this config (to step 6) with no checkpoint to resume from: "
                                "this one starts afresh from step 0 over its outputs") == 1);
}

TEST_CASE("a run that fails before its first step leaves nothing that blocks running it again with the fix",
          "[trainer][rerun][errors]") {
  // It used to leave config.yaml and metrics.jsonl ({"step": 0, "exit_status": 2}) in the directory it
  // made, and the fixed run was refused: "holds a run of another config ..., with no checkpoint".
  TempDir dir;
  const std::string made = dir.file("made/run");
  auto failed = train(made, {"optim.lr=0.1"}, 2, "0:0");
  INFO(failed.out << failed.err);
  CHECK(failed.exit_code == 1);
  CHECK_FALSE(std::filesystem::exists(dir.file("made")));  // the directory it made, and its parent, are gone
  // A directory that was there before stays, with the failed run's record at step 0: nothing trained,
  // nothing to keep from a run of another config.
  const std::string kept = dir.file("kept");
  std::filesystem::create_directories(kept);
  REQUIRE(train(kept, {"optim.lr=0.1"}, 2, "0:0").exit_code == 1);
  CHECK_THAT(read_file(kept + "/metrics.jsonl"), Contains("\"exit_status\": 1"));
  auto fixed = train(kept, {"checkpoint.every_steps=0", "checkpoint.every_epochs=0"});
  INFO(fixed.out << fixed.err);
  CHECK(fixed.exit_code == 0);
  CHECK_THAT(fixed.err, !Contains("holds a run of another config"));
  // Once a run there has trained, a later one that fails before its first step leaves its record
  // after it: another config is still refused, for the trained run's sake.
  const std::string model = read_file(kept + "/model.pt");
  REQUIRE(train(kept, {"checkpoint.every_steps=0", "checkpoint.every_epochs=0", "train.max_steps=12"}, 2, "0:0")
              .exit_code == 1);
  auto other = train(kept, {"checkpoint.every_steps=0", "checkpoint.every_epochs=0", "optim.lr=0.1"});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("holds a run of another config (optim.lr 0.05 → 0.1), with no checkpoint"));
  CHECK(read_file(kept + "/model.pt") == model);
}

TEST_CASE("a checkpoint whose manifest is gone is not resumed from, and the fresh start says why", "[trainer][rerun]") {
  // It used to start from step 0 without a word, as if the directory held no checkpoint.
  TempDir dir;
  std::string run = dir.file("run");
  REQUIRE(train(run, {"train.max_steps=5"}).exit_code == 0);
  std::filesystem::remove(run + "/checkpoints/step_0000000005.json");
  auto again = train(run, {});
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK(count_occurrences(again.out + again.err,
                          run + "/checkpoints/step_0000000005.pt has no manifest (step_0000000005.json) and cannot be "
                                "resumed from (a save cut short, or its manifest removed); training starts afresh "
                                "from step 0") == 1);
}

TEST_CASE("a run whose metrics.jsonl holds only a line a crash cut short runs again (the report refuses such a file)",
          "[trainer][rerun]") {
  TempDir dir;
  std::string run = dir.file("run");
  const std::vector<std::string> sets{"checkpoint.every_steps=0", "checkpoint.every_epochs=0", "train.max_steps=4"};
  auto first = train(run, sets);
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  write_file(run + "/metrics.jsonl", "{\"step\": 1, \"lo");
  auto again = train(run, sets);
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK_THAT(read_file(run + "/metrics.jsonl"), Contains("\"exit_status\": 0"));
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
                          "logging.report", "train.batch_size", "train.grad_accum_steps", "data.workers",
                          "model.activation_checkpointing"})
    CHECK(ddp::may_change_on_resume(key));
  for (const char* key : {"model.hidden", "optim.lr", "data.path", "train.precision", "sampler.seed", "schedule.name"})
    CHECK_FALSE(ddp::may_change_on_resume(key));
}

TEST_CASE("model changes are the model keys that change what its weights mean, for the tools that load a run's weights",
          "[trainer][rerun]") {
  auto changes = ddp::model_changes(
      "model:\n  n_head: 4\n  init_from: a\n  channels_last: false\n  activation_checkpointing: false\noptim:\n  lr: 1\n",
      "model:\n  n_head: 8\n  init_from: b\n  channels_last: true\n  activation_checkpointing: true\noptim:\n  lr: 2\n");
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].key == "model.n_head");
  CHECK(ddp::describe_changes(changes) == "model.n_head 4 → 8");
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

}  // namespace DDP_TEST_FILE
