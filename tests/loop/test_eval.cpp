// Evaluation a user can bound and watch: eval.max_batches, the final evaluation as a switch,
// progress in a pipe, and an interrupted evaluation that still records what it measured. Real
// ddprun runs of the synthetic MLP.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "support/metric_values.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

std::string config(const std::string& name) { return std::string(DDP_SOURCE_DIR) + "/configs/" + name; }

// ddprun over the synthetic MLP with a 20,000-sample eval split, as a shell command line.
std::string eval_command(int nproc, const std::string& output_dir, const std::vector<std::string>& sets) {
  std::string c = bin("ddprun") + " --standalone --nproc-per-node " + std::to_string(nproc) + " " +
                  config("synthetic_mlp.yaml");
  std::vector<std::string> all{"run.output_dir=" + output_dir, "data.synthetic_test_samples=20000",
                               "train.batch_size=16",          "checkpoint.every_epochs=0",
                               "eval.every_epochs=0",          "eval.every_steps=0"};
  all.insert(all.end(), sets.begin(), sets.end());
  for (const auto& s : all) c += " --set '" + s + "'";
  return "OMP_NUM_THREADS=1 " + c;
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("eval.max_batches 5 evaluates 5 batches' samples of a 20,000-sample split, the same ones at world 1 and "
          "2, and with eval.at_end false no evaluation runs",
          "[eval]") {
  TempDir dir;
  const std::vector<std::string> bounded{"train.max_steps=2", "eval.batch_size=16", "eval.max_batches=5",
                                         "eval.at_start=true", "eval.at_end=false"};
  auto one = run_shell(eval_command(1, dir.file("one"), bounded), std::chrono::seconds(120));
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);
  auto two = run_shell(eval_command(2, dir.file("two"), bounded), std::chrono::seconds(120));
  INFO(two.out << two.err);
  REQUIRE(two.exit_code == 0);
  for (const auto& name : {"one", "two"}) {
    const std::string metrics = read_file(dir.file(std::string(name) + "/metrics.jsonl"));
    INFO(name << ": " << metrics);
    CHECK(count_of(metrics, "\"eval_loss\"") == 1);  // before the first step, and not after the last
    CHECK(metric_value(dir.file(std::string(name) + "/metrics.jsonl"), "eval_samples") == 80);
  }
  // The same 80 samples under the same initial weights: one loss, whichever ranks split them.
  CHECK(metric_value(dir.file("one/metrics.jsonl"), "eval_loss") ==
        Approx(metric_value(dir.file("two/metrics.jsonl"), "eval_loss")).epsilon(1e-6));

  auto none = run_shell(eval_command(1, dir.file("none"), {"train.max_steps=2", "eval.at_start=false",
                                                           "eval.at_end=false"}),
                        std::chrono::seconds(120));
  INFO(none.out << none.err);
  REQUIRE(none.exit_code == 0);
  CHECK(count_of(read_file(dir.file("none/metrics.jsonl")), "eval_") == 0);
}

TEST_CASE("a long evaluation in a pipe logs its progress at least every 10 s, and SIGINT during it stops every "
          "rank with 130, recording what it measured, the exit status and the report",
          "[eval][signals]") {
  TempDir dir;
  // Rank 0 takes 0.3 s a batch over its 100 of 100 samples: 30 s, unless it is stopped.
  const std::string command =
      "DDPRUN_TEST_EVAL_BATCH_DELAY=0:300 " +
      eval_command(2, dir.file("run"), {"train.max_steps=2", "eval.batch_size=100", "eval.at_start=true"});
  const std::string log = dir.file("log");
  auto r = run_shell(command + " > " + log + " 2>&1 & L=$!; " + until_logged(log, "evaluating at step 0", 60, 2) +
                         "kill -INT $L; wait $L; echo status=$?",
                     std::chrono::seconds(90));
  const std::string output = read_file(log);
  INFO(r.out << r.err << output);
  CHECK_THAT(r.out, Contains("status=130"));
  // Two lines 10 s apart (the loop above waited for them), each with how far and how long to go.
  CHECK(std::regex_search(output, std::regex(R"(evaluating at step 0 \(before training\): batch \d+/100 of rank 0's, ETA)")));
  CHECK_THAT(output, Contains("interrupted after") && Contains("of its 20000 samples"));
  CHECK_THAT(output, !Contains("killed them"));  // it stopped within the grace
  const std::string metrics = dir.file("run/metrics.jsonl");
  CHECK(metric_value(metrics, "eval_interrupted") == 1);
  const double measured = metric_value(metrics, "eval_samples");
  CHECK(measured > 0);
  CHECK(measured < 20000);
  CHECK(metric_value(metrics, "exit_status") == 130);
  CHECK(std::filesystem::exists(dir.file("run/report.html")));

  // Stopped before its first batch (the one rank waits 6 s as the evaluation begins, inside the 10 s
  // grace, and is asked to stop in its first seconds): said so, with no
  // means of nothing after it.
  const std::string early_log = dir.file("early.log");
  auto early = run_shell("DDPRUN_TEST_EVAL_DELAY=0:6000 " +
                             eval_command(1, dir.file("early"), {"train.max_steps=2", "eval.at_start=true"}) + " > " +
                             early_log + " 2>&1 & L=$!; " + until_logged(early_log, "peak RSS per rank") +
                             "sleep 1; kill -INT $L; wait $L; echo status=$?",
                         std::chrono::seconds(90));
  const std::string early_output = read_file(early_log);
  INFO(early.out << early_output);
  CHECK_THAT(early.out, Contains("status=130"));
  CHECK_THAT(early_output, Contains("eval at step 0 (before training) interrupted before its first batch") &&
                               !Contains("over those"));
}

TEST_CASE("an evaluation cut short by a stop is done whole on resume, before the next step, once",
          "[eval][signals][resume]") {
  // Note [An evaluation cut short]
  TempDir dir;
  // A run of `sets` in `name`, its evaluation at `step` made slow and stopped by SIGINT (exit 130),
  // then the same command again, which must end (exit 0).
  auto stop_in_eval_then_resume = [&](const std::string& name, const std::vector<std::string>& sets, int step) {
    const std::string log = dir.file(name + ".log");
    auto stopped = run_shell(
        "DDPRUN_TEST_EVAL_BATCH_DELAY=0:300 " + eval_command(1, dir.file(name), sets) + " > " + log + " 2>&1 & L=$!; " +
            until_logged(log, "evaluating at step " + std::to_string(step)) + "kill -INT $L; wait $L; echo status=$?",
        std::chrono::seconds(90));
    INFO(stopped.out << read_file(log));
    REQUIRE_THAT(stopped.out, Contains("status=130"));
    REQUIRE(metric_value(dir.file(name + "/metrics.jsonl"), "eval_interrupted") == 1);
    auto resumed = run_shell(eval_command(1, dir.file(name), sets), std::chrono::seconds(120));
    INFO(resumed.out << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.out, Contains("resumed from") && Contains("at step " + std::to_string(step)));
  };
  stop_in_eval_then_resume("run", {"train.max_steps=3", "eval.every_steps=2", "eval.batch_size=100",
                                   "eval.at_start=false"}, 2);
  // The interrupted record, then the whole one at step 2 before step 3's loss, then the final one.
  const std::string records = read_file(dir.file("run/metrics.jsonl"));
  const auto whole = records.find("\"eval_samples\": 20000", records.find("\"eval_interrupted\": 1"));
  REQUIRE(whole != std::string::npos);
  CHECK(records.rfind("\"step\": 2,", whole) > records.rfind("\"eval_interrupted\": 1"));
  CHECK(records.find("\"step\": 3,") > whole);
  CHECK(count_of(records, "\"eval_samples\": 20000") == 2);  // step 2's and the final one at step 3

  // The final evaluation, which the last step's checkpoint waits for (Note [A checkpoint after its
  // step's evaluation]): the stop writes that checkpoint, saying the evaluation is still to do.
  stop_in_eval_then_resume("final", {"train.max_steps=3", "checkpoint.every_steps=3", "eval.batch_size=100",
                                     "eval.at_start=false"}, 3);
  CHECK(metric_value(dir.file("final/metrics.jsonl"), "eval_samples") == 20000);
}

}  // namespace DDP_TEST_FILE
