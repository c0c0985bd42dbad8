// Faults with real processes: killed workers, preemption, hangs, damaged checkpoints, full disks.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <set>
#include <tuple>

#include "support/metric_values.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string config(const std::string& name) { return std::string(DDP_SOURCE_DIR) + "/configs/" + name; }

std::string ddprun_command(int nproc, const std::string& yaml, const std::vector<std::string>& sets,
                           const std::string& launcher_options = "") {
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " +
                        std::to_string(nproc) + " " + launcher_options + " " + config(yaml);
  for (const auto& s : sets) command += " --set '" + s + "'";
  return command;
}

bool same_bytes(const std::string& a, const std::string& b) {
  std::string x = read_file(a), y = read_file(b);
  return !x.empty() && x == y;
}

// Shell: wait (bounded) until a file exists.
std::string wait_for(const std::string& path) { return until_true("[ -e " + path + " ]"); }

std::vector<std::string> fast_convnet(const std::string& out) {
  return {"run.output_dir=" + out, "train.max_steps=160", "checkpoint.every_steps=40", "checkpoint.every_epochs=0",
          "data.eval_split=none",  "train.log_every=20"};
}

// The synthetic MLP into `out` up to step `steps`, a checkpoint every 20 steps, the last 3 kept.
std::vector<std::string> checkpointed_every_20(const std::string& out, int steps) {
  return {"run.output_dir=" + out, "train.max_steps=" + std::to_string(steps), "checkpoint.every_steps=20",
          "checkpoint.every_epochs=0", "checkpoint.keep_last=3", "data.eval_split=none"};
}

}  // namespace

TEST_CASE("a worker SIGKILLed mid-epoch is restarted and the result is bit-identical", "[faults][slow]") {
  TempDir dir;
  auto straight = run_shell(ddprun_command(2, "fashion_mnist_convnet.yaml", fast_convnet(dir.file("straight"))),
                            std::chrono::seconds(240));
  REQUIRE(straight.exit_code == 0);

  std::string out = dir.file("killed");
  auto killed = run_shell(ddprun_command(2, "fashion_mnist_convnet.yaml", fast_convnet(out), "--max-restarts 1") +
                              " & L=$!; " + wait_for(out + "/checkpoints/step_0000000080.json") +
                              "pkill -KILL -n -f '[d]dp-train.*" + out + "'; wait $L; echo status=$?",
                          std::chrono::seconds(240));
  INFO(killed.out << killed.err);
  CHECK(count_lines(killed.out, "status=0") == 1);
  CHECK_THAT(killed.err, Contains("failed first: signal 9 (SIGKILL)"));
  CHECK_THAT(killed.err, Contains("restarting the workers (restart 1 of 1)"));
  CHECK_THAT(killed.out, Contains("resumed from"));
  CHECK(same_bytes(dir.file("straight/model.pt"), out + "/model.pt"));
}

TEST_CASE("SIGTERM to the launcher checkpoints, exits 143, and the same command resumes", "[faults][slow]") {
  TempDir dir;
  std::string out = dir.file("run");
  std::string command = ddprun_command(2, "fashion_mnist_convnet.yaml",
                                       {"run.output_dir=" + out, "train.max_steps=200", "checkpoint.every_epochs=0",
                                        "data.eval_split=none", "train.log_every=1000"});
  auto first = run_shell(command + " & L=$!; " + wait_for(out + "/metrics.jsonl") +
                             "sleep 0.5; kill -TERM $L; wait $L; echo status=$?",
                         std::chrono::seconds(120));
  INFO(first.out << first.err);
  CHECK(count_lines(first.out, "status=143") == 1);
  CHECK(run_shell("pgrep -f '[d]dp-train.*" + out + "'").out.empty());
  std::smatch match;
  REQUIRE(std::regex_search(first.out, match, std::regex("stopping at step ([0-9]+) as asked \\(SIGTERM\\)")));
  std::string step = match[1];
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoints/step_%010d.json", std::stoi(step));
  CHECK(fs::exists(out + name));
  // The steps since the last log line are logged at the stop, not lost from the metrics.
  CHECK(std::regex_search(read_file(out + "/metrics.jsonl"),
                          std::regex("\\{\"step\": " + step + ", \"epoch\": [0-9]+, \"loss\": ")));

  auto second = run_shell(command, std::chrono::seconds(120));
  INFO(second.out << second.err);
  CHECK(second.exit_code == 0);
  CHECK_THAT(second.out, Contains("at step " + step + " (in epoch 1, after " + step + " of its "));
}

TEST_CASE("SIGUSR1 (Slurm's --signal=USR1@N) to ddprun, or to a ddp-train task, stops with a checkpoint and exit 138",
          "[faults][slurm]") {
  TempDir dir;
  const std::vector<std::string> slow{"train.max_steps=400", "checkpoint.every_epochs=0", "checkpoint.every_steps=0",
                                      "data.eval_split=none", "train.log_every=5"};
  auto with_out = [&](const std::string& out) {
    auto sets = slow;
    sets.push_back("run.output_dir=" + out);
    return sets;
  };
  // Mode A: the launcher passes it on.
  const std::string out = dir.file("launched");
  auto launched = run_shell("DDPRUN_TEST_STEP_DELAY=0:20 " + ddprun_command(2, "synthetic_mlp.yaml", with_out(out)) +
                                " & L=$!; " + wait_for(out + "/metrics.jsonl") + "sleep 0.5; kill -USR1 $L; wait $L; "
                                "echo status=$?",
                            std::chrono::seconds(120));
  INFO(launched.out << launched.err);
  CHECK(count_lines(launched.out, "status=138") == 1);
  CHECK_THAT(launched.out, Contains("as asked (SIGUSR1)"));
  CHECK(!fs::is_empty(out + "/checkpoints"));
  CHECK(run_shell("pgrep -f '[d]dp-train.*" + out + "'").out.empty());
  // Mode B: a task alone, as srun starts it.
  const std::string task_out = dir.file("task");
  std::string command = "DDPRUN_TEST_STEP_DELAY=0:20 OMP_NUM_THREADS=1 " + bin("ddp-train") + " " +
                        config("synthetic_mlp.yaml");
  for (const auto& s : with_out(task_out)) command += " --set '" + s + "'";
  auto task = run_shell(command + " & T=$!; " + wait_for(task_out + "/metrics.jsonl") +
                            "sleep 0.5; kill -USR1 $T; wait $T; echo status=$?",
                        std::chrono::seconds(120));
  INFO(task.out << task.err);
  CHECK(count_lines(task.out, "status=138") == 1);
  CHECK(!fs::is_empty(task_out + "/checkpoints"));
}

TEST_CASE(
    "SIGTERM to one worker is a stop request: every rank stops with a checkpoint, ddprun says stopped, exits 143 "
    "and restarts nothing",
    "[faults]") {
  TempDir dir;
  const std::string out = dir.file("run");
  // Under --max-restarts the stop used to be taken for rank 1's failure, and the run went on.
  auto r = run_shell("DDPRUN_TEST_STEP_DELAY=0:20 " +
                         ddprun_command(2, "synthetic_mlp.yaml",
                                        {"run.output_dir=" + out, "train.max_steps=400", "checkpoint.every_epochs=0",
                                         "data.eval_split=none", "train.log_every=5"},
                                        "--max-restarts 1") +
                         " & L=$!; " + wait_for(out + "/metrics.jsonl") +
                         "sleep 0.5; pkill -TERM -n -f '[d]dp-train.*" + out + "'; wait $L; echo status=$?",
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=143") == 1);
  CHECK_THAT(r.out, Contains("another rank was asked to stop, and every rank stops with it"));
  CHECK_THAT(r.err,
             Contains("stopped: rank ") &&
                 Contains("exit code 143: taken as a stop request (128 + SIGTERM, as a program stopped by SIGTERM "
                          "exits), and its ranks stopped"));
  CHECK_THAT(r.err, !Contains("failed first") && !Contains("restarting the workers"));
  CHECK(!fs::is_empty(out + "/checkpoints"));
  CHECK(metric_value(out + "/metrics.jsonl", "exit_status") == 143);
  CHECK(run_shell("pgrep -f '[d]dp-train.*" + out + "'").out.empty());
}

TEST_CASE("a rank that skips an all-reduce fails the run within the timeout, naming that rank", "[faults]") {
  TempDir ready, ready_onward;
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "2", "--", bin("ddp-test-collective-worker"),
                        "--skip-rank", "1", "--skip-at", "3", "--timeout", "3", "--ready-dir", ready.path()},
                       std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("all_reduce #3 at step 3 failed on rank 0 after 3 s: never arrived: rank 1"));

  auto onward = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "3", "--", bin("ddp-test-collective-worker"),
                             "--skip-rank", "2", "--skip-at", "2", "--timeout", "3", "--continue", "--ready-dir",
                             ready_onward.path()},
                            std::chrono::seconds(60));
  INFO(onward.out << onward.err);
  CHECK(onward.exit_code == 1);
  CHECK_THAT(onward.err, Contains("never arrived: rank 2"));
}

TEST_CASE("a rank that fails is named by its last collective, not by a count published before it (it leaves with "
          "_Exit, past the destructor that published its last word)",
          "[faults]") {
  TempDir dir;
  auto r = run_shell("DDPRUN_TEST_FAIL_AT_STEP=1:5 " +
                         ddprun_command(2, "synthetic_mlp.yaml", {"run.output_dir=" + dir.file("run")}),
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  // Steps are milliseconds: the count published every 200 ms said "none #0 at step 0".
  CHECK(std::regex_search(r.out + r.err, std::regex(R"(never arrived: rank 1 \(its last published count is gradient )"
                                                    R"(all_reduce #(\d+) at step [45]\))")));
  // Rank 0's exit record names the rank whose failure its own followed, and the report says so
  // (was: "exit 1", rank 0's, where the job's was another's).
  CHECK(metric_value(dir.file("run/metrics.jsonl"), "never_arrived_rank") == 1);
  CHECK_THAT(read_file(dir.file("run/report.html")),
             Contains(R"(<span class="failed">rank 1 never arrived</span> at a collective, and rank 0 exited 1)"));
}

TEST_CASE("a rank that skips an all-reduce of a sub-group is named by its world rank, at the trainer's step", "[faults]") {
  // Groups {0, 2} and {1, 3}, as a mesh dimension's: rank 3 is position 1 of rank 1's group.
  TempDir ready;
  auto r = run_command({bin("ddprun"), "--standalone", "--nproc-per-node", "4", "--", bin("ddp-test-collective-worker"),
                        "--group-stride", "2", "--skip-rank", "3", "--skip-at", "3", "--timeout", "3", "--ready-dir",
                        ready.path()},
                       std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("all_reduce #3 at step 3 failed on rank 1 after 3 s: never arrived: rank 3 (its last "
                             "published count is all_reduce #2"));
}

TEST_CASE("the shared-memory all-reduce sums over 3 processes, and a rank that skips one or leaves is named", "[faults][shm]") {
  auto worker = [](std::vector<std::string> extra) {
    TempDir ready;
    std::vector<std::string> argv{bin("ddprun"), "--standalone", "--nproc-per-node", "3", "--",
                                  bin("ddp-test-collective-worker"), "--shared-memory", "--ready-dir", ready.path()};
    if (std::find(extra.begin(), extra.end(), "--timeout") == extra.end()) extra.insert(extra.end(), {"--timeout", "3"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv, std::chrono::seconds(60));
  };
  auto fine = worker({});
  INFO(fine.out << fine.err);
  CHECK(fine.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank)  // 200003 ones (4 chunks) summed over 3 ranks, every element on every rank
    CHECK(count_lines(fine.out, "[rank " + std::to_string(rank) + "] all-reduce 5: 3") == 1);

  auto skipped = worker({"--skip-rank", "1", "--skip-at", "2"});
  INFO(skipped.out << skipped.err);
  CHECK(skipped.exit_code == 1);
  // The op's name has a space, as the gradients' has: the other ranks' counts are read whole, and
  // rank 2, which arrived, is not named.
  CHECK_THAT(skipped.err, Contains("gradient all_reduce #2 at step 2 failed on rank 0 after 3 s: never arrived: rank 1 "
                                   "(its last published count is gradient all_reduce #1 at step 2) [shared-memory"));

  // A rank that leaves early (exit 0) is named as soon as the others wait for it, not after the time-out.
  // The time-out outlasts the harness's limit (60 s): only the early naming ends the run in time.
  auto left = worker({"--skip-rank", "1", "--skip-at", "2", "--exit", "--timeout", "300"});
  INFO(left.out << left.err);
  CHECK(left.exit_code == 1);
  CHECK_THAT(left.err, Contains("rank 1 exited while the others waited for it"));
  CHECK_THAT(left.err,
             Contains("never arrived: rank 1 (its last published count is gradient all_reduce #1 at step 2)"));
}

TEST_CASE("a truncated newest checkpoint is reported and the previous one is used", "[faults][checkpoint]") {
  TempDir dir;
  std::string out = dir.file("run");
  auto sets = [&](int steps) { return checkpointed_every_20(out, steps); };
  REQUIRE(run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets(40))).exit_code == 0);
  std::string newest = out + "/checkpoints/step_0000000040.pt";
  fs::resize_file(newest, fs::file_size(newest) / 2);
  auto resumed = run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets(60)));
  INFO(resumed.out << resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("skipping checkpoint " + newest) && Contains("truncated"));
  CHECK_THAT(resumed.out, Contains("resumed from " + out + "/checkpoints/step_0000000020.pt at step 20"));
  // None that verifies: refused, the checkpoints and the run's record as they were (a fresh start
  // pruned them, files that might have come back, and wrote a second history into metrics.jsonl).
  for (const auto& entry : fs::directory_iterator(out + "/checkpoints"))
    if (entry.path().extension() == ".pt") fs::resize_file(entry.path(), fs::file_size(entry.path()) / 2);
  auto listing = [&] {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(out + "/checkpoints")) names.insert(entry.path().filename());
    return names;
  };
  const auto before = listing();
  const std::string metrics = read_file(out + "/metrics.jsonl");
  auto refused = run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets(80)));
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK(count_occurrences(refused.err, "none of the 3 checkpoint(s) in " + out +
                                           "/checkpoints could be resumed from (each one's cause is said above)") == 1);
  CHECK_THAT(refused.err, Contains("to start afresh, move " + out + " aside or give another run.output_dir"));
  CHECK(listing() == before);
  CHECK(read_file(out + "/metrics.jsonl") == metrics);
}

TEST_CASE("a restart that finds no checkpoint to resume says it starts from step 0", "[faults][checkpoint]") {
  // As an elastic round whose rank 0 is on a node with its own, empty, run directory: a silent
  // retrain from step 0 was the risk (helper-reproduced with node-local output directories).
  TempDir dir;
  const std::string out = dir.file("run");
  auto r = run_shell("DDPRUN_TEST_FAIL_AT_STEP=1:3 " + ddprun_command(2, "synthetic_mlp.yaml",
                                                                      {"run.output_dir=" + out, "train.max_steps=10",
                                                                       "checkpoint.every_steps=0",
                                                                       "checkpoint.every_epochs=0",
                                                                       "data.eval_split=none"},
                                                                      "--max-restarts 1"));
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(count_occurrences(r.out + r.err, "round 1 of this job (a restart, an elastic round or a requeue) finds no checkpoint in " +
                                             out + "/checkpoints: training starts from step 0") == 1);
  CHECK_THAT(r.out + r.err, !Contains("round 0 of this job"));
}

TEST_CASE("a run that fails renders its report of what it recorded, not the one its pacer last allowed",
          "[faults][watch]") {
  // Evaluations every 5 steps come faster than the report's 10 s floor: only the first rendered,
  // and the failure left a page of step 0 saying no all-reduce and no monitor record was made.
  TempDir dir;
  const std::string out = dir.file("run");
  auto r = run_shell("DDPRUN_TEST_FAIL_AT_STEP=1:30 " +
                     ddprun_command(2, "synthetic_mlp.yaml",
                                    {"run.output_dir=" + out, "train.max_steps=40", "train.log_every=5",
                                     "eval.every_steps=5", "eval.max_batches=1", "checkpoint.every_steps=0",
                                     "checkpoint.every_epochs=0", "monitor.every_s=0.01"}));
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  const std::string html = read_file(out + "/report.html");
  CHECK_THAT(html, Contains("<td>run</td><td>29</td>") || Contains("<td>run</td><td>30</td>"));  // the summary's step
  // Rank 0 fails on its peer's loss, or is stopped by its launcher: either way the page says it ended.
  CHECK_THAT(html,
             !Contains("no exit recorded") && (Contains(">rank 1 never arrived</span>") || Contains(">exit 1</span>") ||
                                               Contains(">stopped by signal 15</span>")));
  CHECK_THAT(html, !Contains("No all-reduce") && !Contains("monitor recorded nothing"));
}

// Shell: an MLP run of `nproc` ranks into `out` (with `sets`), started as $L after `wrapper` (a
// prefix such as "timeout 600 env "), which `signals` (shell) signals once it has logged a step; it
// echoes status= with $L's exit status.
std::string signalled_once_stepping(int nproc, const std::string& out, const std::string& wrapper,
                                    std::vector<std::string> sets, const std::string& signals) {
  sets.insert(sets.begin(),
              {"run.output_dir=" + out, "train.epochs=50", "train.log_every=20", "checkpoint.every_epochs=0"});
  return "DDPRUN_TEST_STEP_DELAY=0:10 " + wrapper + ddprun_command(nproc, "synthetic_mlp.yaml", sets) + " & L=$!; " +
         until_logged(out + "/metrics.jsonl", "\"step\"", 50) + signals + "; wait $L; echo status=$?";
}

TEST_CASE("a run under timeout(1) stops with its checkpoint, though timeout sends the one SIGTERM twice",
          "[faults]") {
  // timeout signals its child and then its process group, the child in it: the second delivery,
  // taken as a second Ctrl-C, killed the workers before their checkpoint (Note [One request, sent
  // twice]), in some of the stops.
  // An outside SIGALRM is timeout's own expiry (coreutils' cleanup()): sent once the run logs a
  // step, where a fixed `timeout 4` could fire before a loaded machine had the workers up.
  TempDir dir;
  const std::string out = dir.file("run");
  auto r = run_shell(
      signalled_once_stepping(2, out, "timeout 600 env ", {"eval.every_steps=20"}, "kill -ALRM $L"),
      std::chrono::seconds(90));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=124") == 1);
  CHECK_THAT(r.out, Contains("stopping at step"));
  CHECK_THAT(read_file(out + "/metrics.jsonl"), Contains("\"exit_status\": 143") && Contains("\"peak_rss_mib_max\""));
  CHECK_FALSE(std::filesystem::is_empty(out + "/checkpoints"));
  // The report's summary has the stopped run's peak RSS, which only a finished run's had.
  CHECK_THAT(read_file(out + "/report.html"), Contains("stopped by signal 15") && !Contains("</td><td></td><td><span"));
}

TEST_CASE("one SIGINT sent twice at once, by two senders, stops with the checkpoint as one request does", "[faults]") {
  // A Ctrl-C reaches `timeout --foreground` and ddprun both, and timeout passes its copy on: the
  // same signal from two senders within microseconds. Taken as a second Ctrl-C, it killed the
  // workers with no stop checkpoint (Note [One request, sent twice]). Two kill(1) processes send it
  // here, one after the other.
  TempDir dir;
  const std::string out = dir.file("run");
  auto r = run_shell(
      signalled_once_stepping(1, out, "", {"data.eval_split=none"}, "/bin/kill -INT $L; /bin/kill -INT $L"),
      std::chrono::seconds(90));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=130") == 1);
  CHECK_THAT(r.out + r.err, Contains("stopping at step"));
  CHECK_THAT(read_file(out + "/metrics.jsonl"), Contains("\"exit_status\": 130"));
  CHECK_FALSE(std::filesystem::is_empty(out + "/checkpoints"));
}

TEST_CASE("a newest manifest whose step disagrees with its file is skipped once, and the previous checkpoint is used",
          "[faults][checkpoint]") {
  // The manifest says 38 where its file holds 40 (renamed to match: one named for another step than
  // it says is ignored before it is read). Resume used to try "older than 40" again, which its step
  // of 38 is, and looped on it with a warning a millisecond.
  TempDir dir;
  std::string out = dir.file("run");
  auto sets = [&](int steps) { return checkpointed_every_20(out, steps); };
  REQUIRE(run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets(40))).exit_code == 0);
  const std::string manifest = out + "/checkpoints/step_0000000038.json";
  std::string text = read_file(out + "/checkpoints/step_0000000040.json");
  REQUIRE(text.find("step: 40\n") != std::string::npos);
  text.replace(text.find("step: 40\n"), 9, "step: 38\n");
  write_file(manifest, text);
  std::filesystem::remove(out + "/checkpoints/step_0000000040.json");
  auto resumed = run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets(60)), std::chrono::seconds(60));
  INFO(resumed.out << resumed.err);
  CHECK_FALSE(resumed.timed_out);
  CHECK(resumed.exit_code == 0);
  CHECK(count_occurrences(resumed.out, "skipping checkpoint " + manifest) == 1);
  CHECK_THAT(resumed.out, Contains("says step 38, but") && Contains("holds step 40"));
  CHECK_THAT(resumed.out, Contains("resumed from " + out + "/checkpoints/step_0000000020.pt at step 20"));
}

TEST_CASE("resuming at another world size with another number of samples a step is refused, naming the batch "
          "size that fits",
          "[faults][checkpoint]") {
  TempDir dir;
  std::vector<std::string> sets{"run.output_dir=" + dir.file("run"), "train.max_steps=20", "checkpoint.every_steps=10",
                                "data.eval_split=none", "train.batch_size=16"};
  REQUIRE(run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets)).exit_code == 0);
  sets[1] = "train.max_steps=30";
  auto r = run_shell(ddprun_command(1, "synthetic_mlp.yaml", sets));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("was written by 2 rank(s) × train.batch_size 16 × 1 micro-step(s) = 32 samples a step; "
                             "this run has 1 × 16 × train.grad_accum_steps 1 = 16, which would train other steps; use "
                             "train.batch_size 32 (1 rank(s) × 32 × train.grad_accum_steps 1 = 32 samples a step, as "
                             "written)"));
  auto three = run_shell(ddprun_command(3, "synthetic_mlp.yaml", sets));
  CHECK(three.exit_code == 2);
  CHECK_THAT(three.err, Contains("this run has 3 × 16 × train.grad_accum_steps 1 = 48, which would train other steps; "
                                 "resume as written: 2 rank(s) × train.batch_size 16 × train.grad_accum_steps 1"));
  // Runs of their own, as a config that changes these keys is refused before any checkpoint is read
  // (Note [Re-running a run]).
  auto scaled = sets;
  scaled[0] = "run.output_dir=" + dir.file("scaled");
  scaled[1] = "train.max_steps=20";
  scaled.push_back("optim.lr_scaling=linear");
  REQUIRE(run_shell(ddprun_command(2, "synthetic_mlp.yaml", scaled)).exit_code == 0);
  scaled[1] = "train.max_steps=30";
  scaled[4] = "train.batch_size=32";
  auto rate = run_shell(ddprun_command(1, "synthetic_mlp.yaml", scaled));
  CHECK(rate.exit_code == 2);
  CHECK_THAT(rate.err, Contains("optim.lr_scaling: linear scales the learning rate by the ranks a step's batch counts") &&
                           Contains("written at 2, would go on at another rate at 1; resume with as many"));
  auto chunked = sets;
  chunked[0] = "run.output_dir=" + dir.file("chunked");
  chunked[1] = "train.max_steps=20";
  chunked.push_back("sampler.split=chunk");
  REQUIRE(run_shell(ddprun_command(2, "synthetic_mlp.yaml", chunked)).exit_code == 0);
  chunked[1] = "train.max_steps=30";
  auto chunk = run_shell(ddprun_command(1, "synthetic_mlp.yaml", chunked));
  CHECK(chunk.exit_code == 2);
  CHECK_THAT(chunk.err, Contains("sampler.split: chunk gives each rank a fixed part of the data"));
}

TEST_CASE("resuming with another train.batch_size is refused, naming the key (issue 22, item 6)",
          "[faults][checkpoint]") {
  // Its position counts batches of the old size: resumed, it started at the wrong sample.
  TempDir dir;
  std::vector<std::string> sets{"run.output_dir=" + dir.file("run"), "train.max_steps=20", "checkpoint.every_steps=10",
                                "data.eval_split=none", "train.batch_size=16"};
  REQUIRE(run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets)).exit_code == 0);
  sets[1] = "train.max_steps=30";
  sets[4] = "train.batch_size=32";
  auto r = run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("train.batch_size: " + dir.file("run") + "/checkpoints/step_0000000020.pt was written "
                             "by 2 rank(s) × train.batch_size 16 × 1 micro-step(s) = 32 samples a step; this run has "
                             "2 × 32 × train.grad_accum_steps 1 = 64, which would train other steps; use "
                             "train.batch_size 16"));
  CHECK_THAT(r.err, Contains("rank 1: error: train.batch_size: rank 0's checkpoint was written by"));
  sets[4] = "train.batch_size=16";  // the same size resumes
  auto same = run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets));
  INFO(same.out << same.err);
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.out, Contains("at step 20"));
}

TEST_CASE("nodes whose copies of the data differ in size or content stop at start, naming both", "[faults][errors][multinode]") {
  // Paths may differ between nodes (the config check leaves them aside): 40 images on node 0, 41 on
  // node 1. They used to train on different permutations until a collective failed, far from the
  // cause; 40 other images trained on silently.
  TempDir dir;
  for (const auto& [name, count, pixel] : {std::tuple{"n40", 40, '\x10'}, std::tuple{"n41", 41, '\x10'},
                                           std::tuple{"m40", 40, '\x20'}}) {
    const std::string place = dir.file(name);
    std::filesystem::create_directories(place);
    std::string images("\x00\x00\x08\x03\x00\x00\x00", 7);
    images += static_cast<char>(count);
    images += std::string("\x00\x00\x00\x1c\x00\x00\x00\x1c", 8);
    images += std::string(static_cast<std::size_t>(count) * 28 * 28, pixel);
    std::string labels("\x00\x00\x08\x01\x00\x00\x00", 7);
    labels += static_cast<char>(count);
    labels += std::string(static_cast<std::size_t>(count), '\x01');
    write_file(place + "/train-images-idx3-ubyte", images);
    write_file(place + "/train-labels-idx1-ubyte", labels);
  }
  std::string launch = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 "
                       "--master-port " + std::to_string(free_port()) + " --rdzv-timeout 30 " + config("synthetic_mlp.yaml") +
                       " --set data.dataset=idx --set data.eval_split=none --set data.cache_dir=none --set train.batch_size=4 "
                       "--set run.output_dir=" + dir.file("out");
  for (const auto& [other, names] : {std::pair{"n41", "41 training samples"}, std::pair{"m40", ", content "}}) {
    auto r = run_shell(launch + " --set data.path=" + dir.file(other) + " --node-rank 1 > " + dir.file("node1.log") +
                           " 2>&1 & B=$!; " + launch + " --set data.path=" + dir.file("n40") +
                           " --node-rank 0; A=$?; wait $B; echo statuses=$A,$?",
                       std::chrono::seconds(120));
    INFO(other << "\n" << r.out << r.err << read_file(dir.file("node1.log")));
    CHECK(count_lines(r.out, "statuses=2,2") == 1);
    CHECK_THAT(r.err + read_file(dir.file("node1.log")),
               Contains("rank 1's data differs from rank 0's") && Contains(names) &&
                   Contains("give every node the same data (data.path, data.eval_path)"));
  }
}

TEST_CASE("images of the wrong size and ranks out of range are clear errors", "[faults][errors]") {
  TempDir dir;
  // A valid IDX pair of 4 images of 8x8: readable, but not what the models take.
  std::string images("\x00\x00\x08\x03\x00\x00\x00\x04\x00\x00\x00\x08\x00\x00\x00\x08", 16);
  images += std::string(4 * 8 * 8, '\x10');
  std::string labels("\x00\x00\x08\x01\x00\x00\x00\x04", 8);
  labels += std::string("\x00\x01\x02\x03", 4);
  write_file(dir.file("train-images-idx3-ubyte"), images);
  write_file(dir.file("train-labels-idx1-ubyte"), labels);
  auto r = run_shell(ddprun_command(1, "synthetic_mlp.yaml",
                                    {"data.dataset=idx", "data.path=" + dir.path(), "data.eval_split=none",
                                     "data.cache_dir=none", "run.output_dir=" + dir.file("out")}));
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("(train) holds samples of shape [1, 8, 8]; model.name mlp takes [1, 28, 28]"));

  auto negative = run_command({bin("ddp-train"), config("synthetic_mlp.yaml"), "--rank=-1", "--world-size", "2"});
  CHECK(negative.exit_code == 2);
  CHECK_THAT(negative.err, Contains("rank -1 is out of range for world size 2"));
}

TEST_CASE("an evaluation longer than --stall-timeout is progress: the run finishes, checkpoints and exits 0 "
          "(issue 22, item 7)",
          "[faults][checkpoint]") {
  // Rank 0's evaluations take 12 s, more than twice --stall-timeout; rank 1 waits for it in the
  // eval's all-reduce. Both beat while they do. Before, the heartbeat came only after steps: the run
  // was stopped as stalled.
  TempDir dir;
  std::vector<std::string> sets{"run.output_dir=" + dir.file("run"), "train.max_steps=20", "checkpoint.every_steps=10",
                                "eval.every_steps=10", "eval.at_start=false"};
  auto r = run_shell("DDPRUN_TEST_EVAL_DELAY=0:12000 " +
                         ddprun_command(2, "synthetic_mlp.yaml", sets, "--stall-timeout 5 --max-restarts 1"),
                     std::chrono::seconds(180));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, !Contains("made no progress") && !Contains("restart 1 of 1"));
  CHECK_THAT(r.out, Contains("eval at step 10 ") && Contains("eval at step 20 "));
  CHECK(fs::exists(dir.file("run/checkpoints/step_0000000010.pt")));
  CHECK(fs::exists(dir.file("run/checkpoints/step_0000000020.pt")));
  CHECK(fs::exists(dir.file("run/model.pt")));
}

TEST_CASE("a run's end longer than --stall-timeout is progress: a slow model.pt does not stop a finished run",
          "[faults][checkpoint]") {
  // Rank 0 takes 12 s over the run's end (its model.pt, as a large model's would); rank 1 waits for
  // it in the end's collectives. Before, neither beat there: the run was stopped as stalled at its end.
  TempDir dir;
  auto r = run_shell("DDPRUN_TEST_END_DELAY=0:12000 " +
                         ddprun_command(2, "synthetic_mlp.yaml",
                                        {"run.output_dir=" + dir.file("run"), "train.max_steps=5",
                                         "data.eval_split=none"},
                                        "--stall-timeout 5"),
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, !Contains("made no progress"));
  CHECK(fs::exists(dir.file("run/model.pt")));
}

TEST_CASE("a job killed in the final evaluation resumes before the last step, and its records hold that evaluation",
          "[faults][checkpoint]") {
  // Note [A checkpoint after its step's evaluation]: the last step's checkpoint waits for eval.at_end.
  // Before, it was written first, and the resume found the run done: no eval record at all.
  TempDir dir;
  std::vector<std::string> sets{"run.output_dir=" + dir.file("run"), "train.max_steps=10", "checkpoint.every_steps=5",
                                "eval.every_steps=0", "eval.every_epochs=0", "eval.at_start=false", "eval.at_end=true",
                                "train.log_every=5"};
  const std::string metrics = dir.file("run/metrics.jsonl");
  // ddprun SIGKILLed in the evaluation (step 10's record written, 20 s of it to go): its watchdog
  // takes the workers with it.
  auto killed =
      run_shell("DDPRUN_TEST_EVAL_DELAY=0:20000 " + ddprun_command(2, "synthetic_mlp.yaml", sets, "") + " > " +
                    dir.file("first.out") + " 2>&1 & P=$!; " + until_logged(metrics, "\"step\": 10,") +
                    "sleep 1; "
                    "kill -9 $P; wait $P; echo first=$?",
                std::chrono::seconds(120));
  INFO(killed.out << read_file(dir.file("first.out")));
  CHECK_THAT(killed.out, Contains("first=137"));
  CHECK_FALSE(fs::exists(dir.file("run/checkpoints/step_0000000010.json")));
  CHECK_THAT(read_file(metrics), !Contains("eval_loss"));
  auto resumed = run_shell(ddprun_command(2, "synthetic_mlp.yaml", sets, ""), std::chrono::seconds(120));
  INFO(resumed.out << resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("resumed from " + dir.file("run/checkpoints/step_0000000005.pt") + " at step 5") &&
                              Contains("eval at step 10 "));
  CHECK_THAT(read_file(metrics), Contains("eval_loss"));
  CHECK(fs::exists(dir.file("run/checkpoints/step_0000000010.json")));
}

}  // namespace DDP_TEST_FILE
