// The resume layout check in-process (Note [Resume at another world size]), over a grid of
// checkpoint and run shapes: every refusal names a fix, and following that fix, as a user would
// from the message, resumes with the checkpoint's samples in each step.
#include <catch2/catch.hpp>

#include <regex>

#include "ddp/common/error.h"
#include "ddp/loop/global_batch.h"
#include "ddp/loop/resume_check.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

// The run a user gets from its settings, as the trainer makes it (share_step): train.global_batch_size,
// when set, decides the batch and the micro-steps; a pipeline (of 2 stages) cuts each replica's share
// of the global batch, replicas × 2 × train.batch_size without one, into accum_steps microbatches
// (dist.microbatches).
struct RunSettings {
  int64_t replicas = 1, batch_size = 1, accum_steps = 1, global_batch = 0;
  bool pipeline = false;

  // Throws UserError where the trainer refuses the settings at start.
  ddp::StepShape shape() const {
    ddp::StepShape shape{replicas, batch_size, accum_steps, pipeline};
    if (pipeline) {
      auto share = ddp::share_step(config(), static_cast<int>(2 * replicas));
      shape.batch_size = share.batch_size;
    } else if (global_batch > 0) {
      auto share = ddp::share_global_batch(global_batch, static_cast<int>(replicas), batch_size);
      shape.batch_size = share.batch_size;
      shape.accum_steps = share.grad_accum_steps;
    }
    return shape;
  }
  bool starts() const {
    try {
      shape();
      return true;
    } catch (const ddp::UserError&) {
      return false;
    }
  }
  ddp::TrainConfig config() const {
    ddp::TrainConfig config;
    config.train.batch_size = batch_size;
    config.train.global_batch_size = global_batch;
    config.mesh.pipeline = pipeline ? 2 : 1;
    config.mesh.microbatches = pipeline ? accum_steps : 0;
    return config;
  }
};

int64_t number(const std::smatch& match, int group) { return std::stoll(match[group].str()); }

// Changes `run` as the refusal's fix asks; false when it names none to follow.
bool follow(const std::string& refusal, RunSettings& run) {
  std::smatch m;
  if (std::regex_search(refusal, m, std::regex("use train\\.global_batch_size (\\d+)(?: and train\\.batch_size (\\d+))?"))) {
    run.global_batch = number(m, 1);
    if (m[2].matched) run.batch_size = number(m, 2);
  } else if (std::regex_search(refusal, m, std::regex("use train\\.batch_size (\\d+)"))) {
    run.batch_size = number(m, 1);
  } else if (std::regex_search(refusal, m, std::regex("resume as written: train\\.global_batch_size (\\d+) with "
                                                      "dist\\.microbatches (\\d+) over (\\d+) replica"))) {
    run = RunSettings{number(m, 3), run.batch_size, number(m, 2), number(m, 1), run.pipeline};
  } else if (std::regex_search(refusal, m, std::regex("resume as written: (\\d+) \\w+\\(s\\) × train\\.batch_size "
                                                      "(\\d+) × [a-z_.]+ (\\d+)"))) {
    run = RunSettings{number(m, 1), number(m, 2), number(m, 3), 0, run.pipeline};
  } else {
    return false;
  }
  return true;
}

// The config rules the settings must keep (loop_config.cpp): with a global batch, the micro-steps
// are chosen from it, so train.grad_accum_steps stays 1.
bool valid(const RunSettings& run) { return run.global_batch == 0 || run.pipeline || run.accum_steps == 1; }

}  // namespace

TEST_CASE("every resume refusal's fix, followed, resumes with the checkpoint's samples a step",
          "[loop][resume]") {
  int refused = 0, followed_twice = 0;
  for (int64_t world : {1, 2, 3, 4})
    for (int64_t batch : {2, 3, 4, 8})
      for (int64_t accum : {1, 2, 4})
        for (int64_t batch_in_epoch : {0, 1, 3})
          for (bool pipeline : {false, true})
            for (int64_t replicas : {1, 2, 3, 4})
              for (int64_t now_accum : {1, 2, 4})
                for (int64_t cap : {batch, 2 * batch})  // train.batch_size, a cap under a global batch
                  for (int64_t global_factor : {0, 1, 2}) {
                    ddp::TrainProgress saved;
                    saved.world_size = world;
                    saved.batch_size = batch;
                    saved.accum_steps = accum;
                    saved.batch_in_epoch = batch_in_epoch;
                    const int64_t samples = world * batch * accum;
                    RunSettings run{replicas, cap, now_accum, global_factor * samples, pipeline};
                    if (!valid(run)) continue;
                    if (!run.starts()) continue;  // refused at start, before any checkpoint is read
                    INFO("checkpoint: " << world << " × " << batch << " × " << accum << " at micro-batch "
                                        << batch_in_epoch << "; run: " << replicas << " replicas, batch " << cap
                                        << ", accum " << now_accum << (pipeline ? " (pipeline)" : "")
                                        << ", global batch " << run.global_batch);
                    std::string last;
                    int tries = 0;
                    for (; tries < 3; ++tries) {
                      try {
                        ddp::check_resume_layout(saved, run.shape(), run.config(), "step_1.pt");
                        break;
                      } catch (const ddp::UserError& e) {
                        last = e.what();
                        INFO("refused: " << last);
                        REQUIRE(follow(last, run));
                        REQUIRE(valid(run));
                        REQUIRE(run.starts());
                      }
                    }
                    INFO("last refusal: " << last);
                    REQUIRE(tries < 3);
                    CHECK(run.shape().samples() == samples);
                    refused += tries > 0;
                    followed_twice += tries > 1;
                  }
  CHECK(refused > 100);        // the grid does reach the refusals
  CHECK(followed_twice == 0);  // and each fix resumes at once, not into another refusal
}

TEST_CASE("a resume whose position falls inside this run's micro-batches is refused, naming the shape that fits",
          "[loop][resume]") {
  // 2 ranks × 3 samples stopped 6 samples into the epoch; 3 ranks × 2 samples × 2 micro-steps make
  // the same 12 a step but micro-batches of 6 (fine), 4 ranks × 3 micro-batches of 12 (not).
  ddp::TrainProgress saved{10, 0, 1, 3, 2, 2};
  ddp::TrainConfig config;
  CHECK_NOTHROW(ddp::check_resume_layout(saved, ddp::StepShape{3, 2, 2, false}, config, "step_10.pt"));
  CHECK_THROWS_WITH(ddp::check_resume_layout(saved, ddp::StepShape{4, 3, 1, false}, config, "step_10.pt"),
                    "train.batch_size: step_10.pt stopped 6 samples into its epoch, not a whole number of this run's "
                    "micro-batches of 4 × 3; resume as written: 2 rank(s) × train.batch_size 3 × "
                    "train.grad_accum_steps 2; or start afresh in another run.output_dir");
}

TEST_CASE("a pipeline's resume fix keeps to what train.global_batch_size allows: train.grad_accum_steps 1, and no "
          "learning rate scaled by the world size", "[loop][resume][pipeline]") {
  // Written by 1 replica of 2 stages, batch 8 × train.grad_accum_steps 2: 32 samples, as 4
  // microbatches of 8. Resumed with train.batch_size 4: 16 samples a step, refused.
  ddp::TrainProgress saved{10, 0, 0, 8, 1, 4};
  ddp::TrainConfig config;
  config.mesh.pipeline = 2;
  config.train.batch_size = 4;
  config.train.grad_accum_steps = 2;
  auto share = ddp::share_step(config, 2);
  ddp::StepShape now{1, share.batch_size, share.grad_accum_steps, share.microbatched, config.train.grad_accum_steps};
  CHECK_THROWS_WITH(ddp::check_resume_layout(saved, now, config, "step_10.pt"),
                    Catch::Contains("; use train.global_batch_size 32 and train.grad_accum_steps 1 as written;"));
  // Followed, it starts (train.global_batch_size takes train.grad_accum_steps 1) and resumes.
  config.train.global_batch_size = 32;
  config.train.grad_accum_steps = 1;
  share = ddp::share_step(config, 2);
  CHECK_NOTHROW(ddp::check_resume_layout(
      saved, {1, share.batch_size, share.grad_accum_steps, share.microbatched, 1}, config, "step_10.pt"));
  // Under optim.lr_scaling, which train.global_batch_size refuses, it is train.batch_size, and followed resumes.
  config.train.global_batch_size = 0;
  config.train.grad_accum_steps = 2;
  config.optim.lr_scaling = "linear";
  CHECK_THROWS_WITH(ddp::check_resume_layout(saved, now, config, "step_10.pt"),
                    Catch::Contains("; use train.batch_size 8 (2 rank(s) × 8 × train.grad_accum_steps 2 = 32 samples a "
                                    "step, as written);"));
  config.train.batch_size = 8;
  share = ddp::share_step(config, 2);
  CHECK_NOTHROW(ddp::check_resume_layout(
      saved, {1, share.batch_size, share.grad_accum_steps, share.microbatched, 2}, config, "step_10.pt"));
}

TEST_CASE("under optim.lr_scaling a resume keeps the ranks the rate was scaled by, not the replicas",
          "[loop][resume][pipeline]") {
  ddp::TrainConfig config;
  config.optim.lr_scaling = "linear";
  config.train.batch_size = 16;
  // Written at world 2 replicated (2 replicas, rate × 2): 2 stages at world 2 (1 replica, rate × 2)
  // train the same 32 samples a step at the same rate, and resume.
  ddp::TrainProgress replicated{10, 0, 0, 16, 2, 1};
  replicated.lr_ranks = 2;
  CHECK_NOTHROW(ddp::check_resume_layout(replicated, ddp::StepShape{1, 16, 2, true, 1, 2}, config, "step_10.pt"));
  // Written at world 1 with 2 micro-steps (rate × 1): 2 stages at world 2, one replica of the same
  // 32 samples, would scale it by 2.
  ddp::TrainProgress alone{10, 0, 0, 16, 1, 2};
  alone.lr_ranks = 1;
  CHECK_THROWS_WITH(ddp::check_resume_layout(alone, ddp::StepShape{1, 16, 2, true, 1, 2}, config, "step_10.pt"),
                    Catch::Contains("optim.lr_scaling: linear scales the learning rate by the ranks a step's batch "
                                    "counts (each pipeline stage, a dist.tensor group once), so step_10.pt, written at "
                                    "1, would go on at another rate at 2"));
  // A checkpoint from before lr_ranks was recorded scaled by its replicas.
  alone.lr_ranks = 0;
  CHECK_THROWS_WITH(ddp::check_resume_layout(alone, ddp::StepShape{1, 16, 2, true, 1, 2}, config, "step_10.pt"),
                    Catch::Contains("written at 1, would go on at another rate at 2"));
}

TEST_CASE("a resume compares the data's content where its checkpoint recorded it, and the rest where it did not",
          "[trainer][resume]") {
  const std::string sizes = "/d/a.bin: 80000 bytes\ntraining windows: 9\n";
  const ddp::RunIdentity now{"", sizes + "content of /d/a.bin: XXH64 00000000000000aa of sampled blocks\n", ""};
  CHECK(ddp::run_identity_refusal(now, now, "ck").empty());
  // Written before content was recorded: its sizes agree, and that is all it can tell.
  CHECK(ddp::run_identity_refusal({"", sizes, ""}, now, "ck").empty());
  CHECK_THAT(ddp::run_identity_refusal({"", "/d/a.bin: 79998 bytes\ntraining windows: 9\n", ""}, now, "ck"),
             Catch::Contains("then, not now: /d/a.bin: 79998 bytes; now, not then: /d/a.bin: 80000 bytes"));
  // Recorded, and rewritten since at the same size.
  const ddp::RunIdentity then{"", sizes + "content of /d/a.bin: XXH64 00000000000000bb of sampled blocks\n", ""};
  CHECK_THAT(ddp::run_identity_refusal(then, now, "ck"),
             Catch::Contains("then, not now: content of /d/a.bin: XXH64 00000000000000bb of sampled blocks; now, not "
                             "then: content of /d/a.bin: XXH64 00000000000000aa"));
}

}  // namespace DDP_TEST_FILE
