// The trainer against a broken disk, a second run and a hostile neighbour (issue 12): a full disk is
// an I/O failure that is restarted, files planted as symlinks are never followed, an output
// directory holds one run, and a lying IDX header costs nothing.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <sstream>

#include "support/leftovers.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;
using Catch::EndsWith;
namespace fs = std::filesystem;

namespace {

// ddprun on the synthetic MLP; with `tmpdir`, its private store directory goes there (TMPDIR), so a
// test can see that none is left behind.
std::string ddprun_command(int nproc, const std::vector<std::string>& sets, const std::string& options = "",
                           const std::string& tmpdir = "") {
  std::string command = (tmpdir.empty() ? "" : "TMPDIR=" + tmpdir + " ") + "OMP_NUM_THREADS=1 " + bin("ddprun") +
                        " --standalone --nproc-per-node " +
                        std::to_string(nproc) + " " + options + " " + std::string(DDP_SOURCE_DIR) +
                        "/configs/synthetic_mlp.yaml";
  for (const auto& s : sets) command += " --set '" + s + "'";
  return command;
}

// The bytes of `file` (model.pt, model.safetensors) from a 2-step run into `dir`'s first/.
std::string trained_weights(const TempDir& dir, const std::string& file) {
  REQUIRE(run_shell(ddprun_command(1, {"train.max_steps=2", "data.eval_split=none",
                                       "run.output_dir=" + dir.file("first")})).exit_code == 0);
  return read_file(dir.file("first/" + file));
}

}  // namespace

TEST_CASE("a full disk during a save is an I/O failure: exit 74, restarted, and resumable once there is room",
          "[reliability][checkpoint]") {
  if (!can_mount_tmpfs()) {
    WARN("skipped: cannot mount a small tmpfs here (needs root and mount namespaces) to fill a disk");
    return;
  }
  TempDir dir;
  std::vector<std::string> sets{"train.max_steps=30", "checkpoint.every_steps=10", "checkpoint.every_epochs=0",
                                "checkpoint.keep_last=1", "data.eval_split=none"};
  // One checkpoint's size, from a run with room, sizes a disk that holds one checkpoint but not two.
  auto sizing = sets;
  sizing.push_back("run.output_dir=" + dir.file("sizing"));
  REQUIRE(run_shell(ddprun_command(1, sizing)).exit_code == 0);
  auto checkpoint_bytes = fs::file_size(dir.file("sizing/checkpoints/step_0000000030.pt"));
  std::string out = dir.file("run");
  fs::create_directories(out + "/checkpoints");
  sets.push_back("run.output_dir=" + out);
  auto kib = std::to_string(checkpoint_bytes * 3 / 2 / 1024 + 8);
  auto r = run_shell("unshare -m sh -c 'mount -t tmpfs -o size=" + kib + "k tmpfs " + out + "/checkpoints; " +
                         ddprun_command(1, sets, "--max-restarts 1") + "; echo status=$?; "
                         "mount -o remount,size=64m " + out + "/checkpoints; " + ddprun_command(1, sets) +
                         "; echo again=$?'",
                     std::chrono::seconds(240));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=74") == 1);
  CHECK_THAT(r.err, Contains("rank 0: I/O error: cannot write") && Contains("step_0000000020.pt") &&
                        Contains("No space left on device"));
  CHECK_THAT(r.err, Contains("restarting the workers (restart 1 of 1)"));
  CHECK(count_lines(r.out, "again=0") == 1);
  CHECK_THAT(r.out, Contains("step_0000000010.pt at step 10"));  // the checkpoint before the full disk
  check_nothing_left(out);
}

TEST_CASE("a full disk at world 2: the summary names rank 0, whose write failed, not the rank that relayed it first",
          "[reliability][checkpoint]") {
  if (!can_mount_tmpfs()) {
    WARN("skipped: cannot mount a small tmpfs here (needs root and mount namespaces) to fill a disk");
    return;
  }
  TempDir dir;
  std::string out = dir.file("run");
  fs::create_directories(out + "/checkpoints");
  auto r =
      run_shell("unshare -m sh -c 'mount -t tmpfs -o size=8k tmpfs " + out + "/checkpoints; " +
                    ddprun_command(2, {"train.max_steps=10", "checkpoint.every_steps=10", "checkpoint.every_epochs=0",
                                       "data.eval_split=none", "run.output_dir=" + out}) +
                    "'",
                std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 74);
  // Rank 1 fails with rank 0's words and, having less to clean up, is usually reaped first.
  CHECK_THAT(r.err, Contains("rank 1: I/O error: rank 0: cannot write"));
  CHECK_THAT(r.err, Contains("ddprun: rank 0 failed first: exit code 74"));
  CHECK_THAT(r.err,
             Contains("ddprun:   | ddp-train: rank 0: I/O error: cannot write") && Contains("No space left on device"));
  CHECK_THAT(r.err, !Contains("rank 1 failed first"));
}

TEST_CASE("a run.output_dir a file stands in the way of is a usage error: exit 2, one line, never restarted",
          "[reliability]") {
  TempDir dir;
  write_file(dir.file("afile"), "a file, not a directory");
  for (const std::string& out : {dir.file("afile"), dir.file("afile/run")}) {
    auto r = run_shell(ddprun_command(2, {"train.max_steps=3", "run.output_dir=" + out}, "--max-restarts 2"));
    INFO(out << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("rank 0: error: cannot create run.output_dir " + out));
    CHECK_THAT(r.err, !Contains("restarting the workers"));
  }
  CHECK(read_file(dir.file("afile")) == "a file, not a directory");
}

TEST_CASE("a config with two problems: at world 2 each is said once, on a line of its own, and the summary is the "
          "usage error's",
          "[reliability]") {
  TempDir dir;
  auto r = run_shell(ddprun_command(2, {"optim.lr=0", "train.epochs=0", "run.output_dir=" + dir.file("run")}));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  for (const std::string problem : {"error: optim.lr: must be in (0, 1e+06], got 0",
                                    "error: train.epochs: must be in [1, 1e+06], got 0"}) {
    CHECK(count_occurrences(r.err, problem) == 1);
  }
  CHECK_THAT(r.err, Contains("stopped on a usage error (exit code 2), for the reason above"));
  CHECK_THAT(r.err, !Contains("failed first"));
}

TEST_CASE("a key set where it does nothing is said once, by rank 0, and the run goes on", "[reliability][config]") {
  TempDir dir;
  auto r = run_shell(ddprun_command(2, {"train.max_steps=2", "data.eval_split=none", "dist.microbatches=4",
                                        "run.output_dir=" + dir.file("run")}));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(count_occurrences(r.out + r.err, "dist.microbatches: does nothing without a pipeline (dist.pipeline is 1)") ==
        1);
}

TEST_CASE("a data.cache_dir that cannot be written is said once a node, not once a rank", "[reliability][cache]") {
  TempDir dir;
  write_file(dir.file("a-file"), "x");
  auto r = run_shell("OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node 2 " +
                     std::string(DDP_SOURCE_DIR) + "/configs/fashion_mnist_linear3.yaml --set train.max_steps=2 "
                     "--set data.eval_split=none --set data.cache_dir=" + dir.file("a-file/cache") +
                     " --set run.output_dir=" + dir.file("run"),
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(count_occurrences(r.out + r.err, "data.cache_dir " + dir.file("a-file/cache") + " is not writable") == 1);
}

TEST_CASE("a dataset cache that a full disk cuts short is said once a node, leaves no part behind, and the run "
          "reads into memory",
          "[reliability][cache]") {
  if (!can_mount_tmpfs()) {
    WARN("skipped: cannot mount a small tmpfs here (needs root and mount namespaces) to fill a disk");
    return;
  }
  TempDir dir;
  const std::string cache = dir.file("cache");
  fs::create_directories(cache);
  auto r = run_shell("unshare -m sh -c 'mount -t tmpfs -o size=256k tmpfs " + cache + " && OMP_NUM_THREADS=1 " +
                         bin("ddprun") + " --standalone --nproc-per-node 2 " + std::string(DDP_SOURCE_DIR) +
                         "/configs/fashion_mnist_linear3.yaml --set train.max_steps=2 --set data.eval_split=none "
                         "--set data.cache_dir=" + cache + " --set run.output_dir=" + dir.file("run") +
                         "; echo status=$?; ls -A " + cache + "'",
                     std::chrono::seconds(120));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "status=0") == 1);
  CHECK(count_occurrences(r.out + r.err, "cannot write the dataset cache (") == 1);
  CHECK_THAT(r.out + r.err, Contains("No space left on device") && Contains("into memory"));
  // What the tmpfs held at the end: the lock files alone, no cut-short cache file or temporary.
  std::istringstream listed(r.out.substr(r.out.find("status=0")));
  std::string line;
  std::getline(listed, line);
  while (std::getline(listed, line)) CHECK_THAT(line, Catch::EndsWith(".lock") || Catch::EndsWith(".inuse"));
}

TEST_CASE("a loss that is no number stops the run at the next log step: exit 2, said once, no model.pt, never "
          "restarted",
          "[reliability]") {
  // Starting weights whose last 64 bytes are 0xff, NaN as float32: every loss after is NaN. The
  // run used to train on to exit 0 and write a NaN model.pt.
  TempDir dir;
  std::string weights = trained_weights(dir, "model.safetensors");
  REQUIRE(weights.size() > 64);
  weights.replace(weights.size() - 64, 64, std::string(64, '\xff'));
  write_file(dir.file("nan.safetensors"), weights);
  // At a log step; and in a run shorter than train.log_every, at its end, before model.pt.
  for (const auto& [steps, log_every] : std::vector<std::pair<std::string, std::string>>{{"30", "10"}, {"5", "1000"}}) {
    const std::string out = dir.file("run" + steps);
    // Checkpoints at steps 4 and 8 of the first: the message names the one of the NaN steps. The second
    // saves none in its 5 steps (one a 32-step epoch): it names none (was: "a checkpoint after step 0").
    const std::string every = steps == "30" ? "4" : "0";
    auto r = run_shell(ddprun_command(
        2,
        {"train.max_steps=" + steps, "train.log_every=" + log_every, "data.eval_split=none",
         "model.init_from=" + dir.file("nan.safetensors"), "checkpoint.every_steps=" + every, "run.output_dir=" + out},
        "--max-restarts 1"));
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    const std::string said = "error: the training loss over steps 1-" + std::to_string(std::min(
                                 std::stoi(steps), std::stoi(log_every))) + " is nan: training diverged";
    CHECK(count_occurrences(r.err, said) == 1);
    CHECK(count_occurrences(r.err, "and a checkpoint after step 0 may hold diverged weights") ==
          (every == "4" ? 1 : 0));
    CHECK_THAT(r.err, Contains("stopped on a usage error (exit code 2), for the reason above"));
    CHECK_THAT(r.err, !Contains("restarting the workers"));
    CHECK_FALSE(fs::exists(out + "/model.pt"));
    // The record of the NaN and the failure's status: the report showed a run that had stopped early.
    const std::string metrics = read_file(out + "/metrics.jsonl");
    CHECK_THAT(metrics, Contains("\"loss\": null}") && EndsWith("\"exit_status\": 2}\n"));
    CHECK_THAT(read_file(out + "/report.html"), Contains("<td>nan</td>") && Contains(">exit 2</span>") &&
                                                    !Contains("the run ended before it logged a training step"));
  }
  // The same command again: its checkpoints of steps 4 and 8 hold the diverged weights, and are
  // passed over, said, to none (was: resumed from step 8, to diverge again at its next log step).
  auto again = run_shell(ddprun_command(2, {"train.max_steps=30", "train.log_every=10", "data.eval_split=none",
                                            "model.init_from=" + dir.file("nan.safetensors"),
                                            "checkpoint.every_steps=4", "run.output_dir=" + dir.file("run30")}));
  INFO(again.out << again.err);
  CHECK(again.exit_code == 2);
  CHECK_THAT(
      again.out + again.err,
      Contains("skipping checkpoint " + dir.file("run30/checkpoints/step_0000000008.json") +
               ": its weights are not all finite (the run diverged before step 8); trying the previous one") &&
          Contains("none of the 2 checkpoint(s) in " + dir.file("run30/checkpoints") + " could be resumed from"));
  // Named, it is refused; ddp-export passes over both, and the run left no model.pt to fall back on.
  auto named =
      run_shell(ddprun_command(2, {"train.max_steps=30", "train.log_every=10", "data.eval_split=none",
                                   "model.init_from=" + dir.file("nan.safetensors"), "checkpoint.every_steps=4",
                                   "run.output_dir=" + dir.file("run30"),
                                   "checkpoint.resume=" + dir.file("run30/checkpoints/step_0000000004.json")}));
  INFO(named.out << named.err);
  CHECK(named.exit_code == 2);
  CHECK_THAT(named.err, Contains("checkpoint.resume: ") &&
                            Contains(": its weights are not all finite (the run diverged before step 4); name an "
                                     "earlier one"));
  auto exported = run_command({bin("ddp-export"), dir.file("run30"), "-o", dir.file("export")});
  INFO(exported.out << exported.err);
  CHECK(exported.exit_code == 2);
  CHECK(count_occurrences(exported.err, "its weights are not all finite") == 2);
  CHECK_THAT(exported.err, Contains("has neither a checkpoint nor model.pt to export"));
}

TEST_CASE("a model.pt with one bit flipped is refused as model.init_from, naming the damaged record, where LibTorch "
          "loads it",
          "[reliability]") {
  TempDir dir;
  std::string weights = trained_weights(dir, "model.pt");
  REQUIRE(weights.size() > 100000);
  weights[weights.size() / 2] ^= 0x10;  // inside the largest tensor's record: a weight, not the zip's structure
  write_file(dir.file("flipped.pt"), weights);
  auto r = run_shell(ddprun_command(1, {"train.max_steps=2", "data.eval_split=none",
                                        "model.init_from=" + dir.file("flipped.pt"), "run.output_dir=" + dir.file("run")}));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("error: model.init_from: " + dir.file("flipped.pt") + ": damaged: record data/") &&
                        Contains("is not what was written (its CRC-32 is "));
  // The file as written loads.
  write_file(dir.file("whole.pt"), read_file(dir.file("first/model.pt")));
  CHECK(run_shell(ddprun_command(1, {"train.max_steps=2", "data.eval_split=none",
                                     "model.init_from=" + dir.file("whole.pt"), "run.output_dir=" + dir.file("again")}))
            .exit_code == 0);
}

TEST_CASE("ddp-train ignores SIGPIPE, as a Python worker does: a closed reader is an error to handle, never a silent "
          "death",
          "[reliability]") {
  // The same holds for a peer's socket that Gloo writes after the peer has gone; a closed stdout
  // is the case a test can make without a race. Here the output is lost and the run goes on.
  TempDir dir;
  // env resets SIGPIPE first: an ignored one would be inherited (whatever runs the tests may ignore
  // it), and the test could not fail.
  auto r = run_shell("{ OMP_NUM_THREADS=1 env --default-signal=PIPE " + bin("ddp-train") + " " +
                     std::string(DDP_SOURCE_DIR) +
                     "/configs/synthetic_mlp.yaml --set train.max_steps=30 --set data.eval_split=none --set "
                     "run.output_dir=" + dir.file("run") + " 2>/dev/null; echo status=$? >&2; } | head -c0");
  INFO(r.out << r.err);
  CHECK(count_lines(r.err, "status=0") == 1);
  CHECK(fs::is_regular_file(dir.file("run/model.pt")));
}

TEST_CASE("files planted as symlinks in the output directory are never followed", "[reliability][hardening]") {
  TempDir dir;
  std::string out = dir.file("run");
  std::string victim = dir.file("victim.txt");
  write_file(victim, "precious\n");
  fs::create_directories(out + "/checkpoints");
  // The temporaries of config.yaml, a checkpoint and model.pt, as they were named before.
  for (const char* planted : {"/config.yaml.tmp", "/checkpoints/step_0000000010.pt.tmp", "/model.pt.tmp"})
    fs::create_symlink(victim, out + planted);
  std::vector<std::string> sets{"run.output_dir=" + out, "train.max_steps=10", "checkpoint.every_steps=10",
                                "data.eval_split=none"};
  auto r = run_shell(ddprun_command(1, sets));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(read_file(victim) == "precious\n");
  CHECK(fs::is_regular_file(out + "/model.pt"));
  // No temporary of ours is left behind.
  for (const auto& entry : fs::recursive_directory_iterator(out))
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);

  // An append-only file planted as a symlink is refused, naming it.
  std::string other = dir.file("other");
  fs::create_directories(other);
  fs::create_symlink(victim, other + "/metrics.jsonl");
  sets[0] = "run.output_dir=" + other;
  fs::create_directories(dir.file("tmp"));
  auto refused = run_shell(ddprun_command(1, sets, "", dir.file("tmp")));
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 74);
  CHECK_THAT(refused.err, Contains("metrics.jsonl: it is a symbolic link, which is not followed"));
  CHECK(read_file(victim) == "precious\n");
  check_nothing_left(other, dir.file("tmp"));
}

TEST_CASE("a second run in the same output directory is refused, naming the first", "[reliability]") {
  TempDir dir;
  std::string out = dir.file("run");
  std::vector<std::string> sets{"run.output_dir=" + out, "train.max_steps=100000", "train.epochs=1000",
                                "checkpoint.every_epochs=0", "data.eval_split=none", "train.log_every=10"};
  std::vector<std::string> other_config = sets;
  other_config.push_back("optim.lr=0.1");
  auto r = run_shell(ddprun_command(2, sets) + " > " + dir.file("first.log") + " 2>&1 & L=$!; " +
                         until_true("[ -s " + out + "/metrics.jsonl ]", 30) + ddprun_command(1, sets) +
                         "; echo second=$?; " + ddprun_command(1, other_config) +
                         "; echo third=$?; kill -TERM $L; wait $L; echo first=$?",
                     std::chrono::seconds(120));
  INFO(r.out << r.err << read_file(dir.file("first.log")));
  CHECK(count_lines(r.out, "second=2") == 1);
  CHECK(count_lines(r.out, "third=2") == 1);
  CHECK(count_occurrences(r.err, "run.output_dir: " + out + " is in use by another run (pid ") == 2);
  // Told before anything about the live run's outputs (was: "starts afresh over its outputs", and
  // for another config, "remove DIR to start this one there").
  CHECK_THAT(r.err, !Contains("afresh") && !Contains("remove"));
  CHECK(count_lines(r.out, "first=143") == 1);  // the first run was untouched, and stopped when asked
  CHECK_THAT(read_file(dir.file("first.log")), Contains("checkpoint saved"));
  check_nothing_left(out);
}

TEST_CASE("an IDX header that claims 50M images in a 1 KB file fails at once, with the message only",
          "[reliability][errors]") {
  TempDir dir;
  std::string images("\x00\x00\x08\x03\x02\xfa\xf0\x80\x00\x00\x00\x1c\x00\x00\x00\x1c", 16);  // 50,000,000 x 28 x 28
  images += std::string(1024 - images.size(), '\x01');
  std::string labels("\x00\x00\x08\x01\x02\xfa\xf0\x80", 8);
  write_file(dir.file("train-images-idx3-ubyte"), images);
  write_file(dir.file("train-labels-idx1-ubyte"), labels);
  auto r = run_shell(ddprun_command(1, {"data.dataset=idx", "data.path=" + dir.path(), "data.eval_split=none",
                                        "data.cache_dir=none", "run.output_dir=" + dir.file("out")}),
                     std::chrono::seconds(60));
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("train-images-idx3-ubyte: truncated: expected 39200000000 bytes of data, found 1008"));
  CHECK_THAT(r.err, !Contains("frame #") && !Contains("Exception raised from"));

  // Gzipped, the bound is deflate's best ratio: 1 KB cannot inflate to 39 GB.
  std::string gz = dir.file("gz");
  fs::create_directories(gz);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"})
    REQUIRE(run_shell("gzip -c " + dir.file(name) + " > " + gz + "/" + name + ".gz").exit_code == 0);
  auto zipped = run_shell(ddprun_command(1, {"data.dataset=idx", "data.path=" + gz, "data.eval_split=none",
                                             "data.cache_dir=none", "run.output_dir=" + dir.file("out2")}),
                          std::chrono::seconds(60));
  INFO(zipped.err);
  CHECK(zipped.exit_code == 2);
  CHECK_THAT(zipped.err, Contains("declares 39200000000 bytes of data, more than a gzip file of this size can hold"));
  check_nothing_left(dir.path());
}

TEST_CASE("two nodes with node-local output directories resume bit-identically to a single-node run",
          "[reliability][checkpoint][multinode]") {
  if (!can_mount_tmpfs()) {
    WARN("skipped: no mount namespaces here (unshare -m), so two nodes cannot see different directories at one path");
    return;
  }
  TempDir dir;
  const std::string config = std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml";
  auto sets = [](const std::string& out, const std::string& extra = "") {
    return " --set run.output_dir=" + out +
           " --set train.max_steps=60 --set checkpoint.every_steps=20 --set checkpoint.every_epochs=0"
           " --set checkpoint.keep_last=10 --set data.eval_split=none --set dist.shared_memory=false" + extra;
  };
  std::string launch = "OMP_NUM_THREADS=1 " + bin("ddprun");
  // The reference: one node, two ranks, uninterrupted (Gloo, as across nodes).
  REQUIRE(run_shell(launch + " --standalone --nproc-per-node 2 " + config + sets(dir.file("ref"))).exit_code == 0);
  // A stale run with another seed: its checkpoints sit on node 1 under the same names.
  REQUIRE(run_shell(launch + " --standalone --nproc-per-node 2 " + config + sets(dir.file("stale"), " --set run.seed=7"))
              .exit_code == 0);
  // Node 0's directory holds the reference's step-20 checkpoint; node 1 sees the stale run's at that path.
  std::string node0 = dir.file("node0"), node1 = dir.file("node1");
  for (const auto& [target, source] : {std::pair{node0, dir.file("ref")}, std::pair{node1, dir.file("stale")}}) {
    fs::create_directories(target + "/checkpoints");
    for (const char* ext : {".pt", ".json"})
      fs::copy_file(source + "/checkpoints/step_0000000020" + ext, target + "/checkpoints/step_0000000020" + ext);
  }
  std::string port = std::to_string(free_port());
  std::string multi = " --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port " + port +
                      " --rdzv-timeout 30 " + config +
                      sets(node0, " --set checkpoint.resume=" + node0 + "/checkpoints/step_0000000020.json");
  auto r = run_shell("unshare -m sh -c 'mount --bind " + node1 + " " + node0 + " && exec env " + launch +
                         " --node-rank 1" + multi + "' & B=$!; " + launch + " --node-rank 0" + multi +
                         "; A=$?; wait $B; echo statuses=$A,$?",
                     std::chrono::seconds(240));
  INFO(r.out << r.err);
  CHECK(count_lines(r.out, "statuses=0,0") == 1);
  CHECK_THAT(r.out, Contains("at step 20"));
  std::string reference = read_file(dir.file("ref/model.pt")), resumed = read_file(node0 + "/model.pt");
  CHECK((!reference.empty() && reference == resumed));
  CHECK(read_file(dir.file("stale/model.pt")) != reference);  // the stale run really differs
}

TEST_CASE("ranks started by hand with different world sizes are told what differs", "[reliability][errors]") {
  TempDir dir;
  std::string port = std::to_string(free_port());
  std::string worker = "OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + std::string(DDP_SOURCE_DIR) +
                       "/configs/synthetic_mlp.yaml --set run.output_dir=" + dir.file("out") +
                       " --set dist.timeout_s=15 --set data.eval_split=none --master-port " + port;
  auto r = run_shell(worker + " --rank 1 --world-size 3 & B=$!; " + worker + " --rank 0 --world-size 2; A=$?; wait $B; "
                         "echo statuses=$A,$?",
                     std::chrono::seconds(90));
  INFO(r.out << r.err);
  CHECK_THAT(r.err, Contains("ddp-train: rank 1: error: rank 1 was started with WORLD_SIZE 3, rank 0 with 2; start "
                             "every rank with the same world size"));
  // Rank 0 is told too, at once (was: "Socket Timeout" after dist.timeout_s).
  CHECK_THAT(r.err, Contains("ddp-train: rank 0: error: rank 0 was started with WORLD_SIZE 2, rank 1 with 3; start "
                             "every rank with the same world size"));
  CHECK(count_lines(r.out, "statuses=2,2") == 1);
  CHECK_FALSE(r.timed_out);
  check_nothing_left(dir.path());

  // Two processes started as rank 1: the later to reach the store is refused before it meets
  // anyone, and the job of the other two runs (was: a raw Gloo "Connection refused" from one of
  // them). Rank 0, which hosts the store, starts once both wait for it, and takes 5 s, so that a
  // client that retries its connect after a pause gets in before the store closes.
  const std::string twice_run = " --world-size 2 --set train.max_steps=2 --set run.output_dir=" + dir.file("twice");
  const std::string waits = dir.file("b.log") + " " + dir.file("c.log");
  auto twice = run_shell(worker + " --rank 1" + twice_run + " >" + dir.file("b.log") + " 2>&1 & B=$!; " + worker +
                             " --rank 1" + twice_run + " >" + dir.file("c.log") + " 2>&1 & C=$!; " +
                             until_logged(waits, "rank 1: still waiting", 60, 2) + "DDPRUN_TEST_STEP_DELAY=0:2500 " +
                             worker + " --rank 0" + twice_run +
                             "; A=$?; wait $B; SB=$?; wait $C; SC=$?; "
                             "echo statuses=$A,$(( SB < SC ? SB : SC )),$(( SB > SC ? SB : SC )); cat " + waits,
                         std::chrono::seconds(90));
  INFO(twice.out << twice.err);
  CHECK(count_occurrences(twice.out, "rank 1 was started twice: another process joined the store at ") == 1);
  CHECK(count_lines(twice.out, "statuses=0,0,2") == 1);
  CHECK_FALSE(twice.timed_out);
}

TEST_CASE("eval labels out of range fail at load, before any training, naming the split", "[reliability][errors]") {
  TempDir dir;
  auto idx = [](uint8_t dims, std::vector<uint32_t> shape, uint8_t fill, const std::string& tail = "") {
    std::string bytes("\x00\x00\x08", 3);
    bytes += static_cast<char>(dims);
    for (uint32_t d : shape)
      for (int b = 3; b >= 0; --b) bytes += static_cast<char>((d >> (8 * b)) & 0xff);
    uint64_t count = 1;
    for (uint32_t d : shape) count *= d;
    return bytes + (tail.empty() ? std::string(count, static_cast<char>(fill)) : tail);
  };
  write_file(dir.file("train-images-idx3-ubyte"), idx(3, {4, 28, 28}, 0x40));
  write_file(dir.file("train-labels-idx1-ubyte"), idx(1, {4}, 0, std::string("\x00\x01\x02\x03", 4)));
  write_file(dir.file("t10k-images-idx3-ubyte"), idx(3, {2, 28, 28}, 0x40));
  write_file(dir.file("t10k-labels-idx1-ubyte"), idx(1, {2}, 0, std::string("\x01\x0c", 2)));  // 12: no such class
  auto r = run_shell(ddprun_command(2, {"data.dataset=idx", "data.path=" + dir.path(), "data.cache_dir=none",
                                        "run.output_dir=" + dir.file("out"), "model.num_classes=10"}),
                     std::chrono::seconds(60));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("model.num_classes: 10 is too few for " + dir.path() + " (test), whose labels go up to 12"));
  CHECK_FALSE(fs::exists(dir.file("out/checkpoints")));
  CHECK_THAT(r.err, Contains("ddp-train: rank ") && Contains(": error:"));
  check_nothing_left(dir.path());
}

}  // namespace DDP_TEST_FILE
