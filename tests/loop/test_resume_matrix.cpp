// The one checkpoint format by real ddprun processes: a checkpoint saved at world 4 under each of
// replicated, ZeRO-1, ZeRO-3, 2 stages and 2 stages × ZeRO-3 resumes under another of them at
// world 2 and at world 1, and each continues to the uninterrupted run's weights within 1e-5; so
// does ZeRO-3's whole checkpoint (checkpoint.format whole), the one-file case.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "support/subprocess.h"
#include "support/weights.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp::test;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

CommandResult ddprun(int nproc, const std::vector<std::string>& sets) {
  std::string command = "OMP_NUM_THREADS=1 " + bin("ddprun") + " --standalone --nproc-per-node " +
                        std::to_string(nproc) + " " + std::string(DDP_SOURCE_DIR) + "/configs/synthetic_mlp.yaml";
  for (const auto& s : sets) command += " --set '" + s + "'";
  return run_shell(command, std::chrono::seconds(300));
}

// The MLP under AdamW with weight decay and clipping, 64 samples a step at any world size, a
// checkpoint at step 15 of 30.
std::vector<std::string> sets(const TempDir& dir, const std::string& name, const std::vector<std::string>& layout) {
  std::vector<std::string> s{"run.output_dir=" + dir.file(name), "train.max_steps=30", "optim.name=adamw",
                             "optim.lr=0.003", "optim.weight_decay=0.1", "train.clip_grad_norm=0.5",
                             "model.hidden=[64,32]", "train.epochs=5", "train.global_batch_size=64",
                             "data.eval_split=none", "checkpoint.every_epochs=0", "checkpoint.every_steps=15",
                             "checkpoint.keep_last=5"};
  s.insert(s.end(), layout.begin(), layout.end());
  return s;
}

const std::map<std::string, std::vector<std::string>> kLayouts{
    {"replicated", {}},
    {"zero1", {"dist.shard=optimizer"}},
    {"zero3", {"dist.shard=parameters"}},
    {"stages", {"dist.pipeline=2"}},
    {"stages_zero3", {"dist.pipeline=2", "dist.shard=parameters"}},
    // checkpoint.format whole under ZeRO-3: every rank's pieces in rank 0's one file.
    {"zero3_whole", {"dist.shard=parameters", "checkpoint.format=whole"}},
};

}  // namespace

TEST_CASE("a checkpoint saved at world 4 under each layout resumes under another at world 2 and at world 1, to the "
          "uninterrupted run's weights within 1e-5",
          "[checkpoint][resume_matrix]") {
  TempDir dir;
  for (const auto& [name, layout] : kLayouts) {
    auto r = ddprun(4, sets(dir, name, layout));
    INFO(name << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  CHECK(fs::exists(dir.file("replicated/checkpoints/step_0000000015.pt")));  // whole: the one-piece case
  CHECK(fs::exists(dir.file("stages_zero3/checkpoints/step_0000000015.shard-3-of-4.pt")));
  CHECK(fs::exists(dir.file("zero3_whole/checkpoints/step_0000000015.pt")));
  CHECK_FALSE(fs::exists(dir.file("zero3_whole/checkpoints/step_0000000015.shard-0-of-4.pt")));
  const std::string reference = dir.file("replicated/model.pt");
  for (const auto& [name, layout] : kLayouts) {
    double worst = largest_difference(reference, dir.file(name + "/model.pt"));
    INFO(name << " at world 4: largest difference from replicated " << worst);
    CHECK(worst < 1e-5);
  }
  // Each saved run cut back to its step-15 checkpoint, then resumed under another layout.
  struct Resume {
    std::string from, to;
    int world;
  };
  for (const Resume& resume : std::vector<Resume>{{"replicated", "stages", 2},
                                                  {"zero1", "zero3", 2},
                                                  {"zero3", "stages_zero3", 2},
                                                  {"stages", "zero1", 2},
                                                  {"stages_zero3", "replicated", 2},
                                                  {"replicated", "zero1", 1},
                                                  {"zero1", "replicated", 1},
                                                  {"zero3", "replicated", 1},
                                                  {"stages", "zero3", 1},
                                                  {"stages_zero3", "replicated", 1},
                                                  {"zero3_whole", "stages_zero3", 2}}) {
    const std::string name = resume.from + "_as_" + resume.to + "_at_" + std::to_string(resume.world);
    fs::copy(dir.file(resume.from), dir.file(name), fs::copy_options::recursive);
    for (const auto& entry : fs::directory_iterator(dir.file(name + "/checkpoints")))
      if (entry.path().filename().string().find("0000000030") != std::string::npos) fs::remove(entry.path());
    fs::remove(dir.file(name + "/model.pt"));
    fs::remove(dir.file(name + "/metrics.jsonl"));
    auto r = ddprun(resume.world, sets(dir, name, kLayouts.at(resume.to)));
    INFO(name << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("at step 15"));
    double worst = largest_difference(reference, dir.file(name + "/model.pt"));
    INFO(name << ": largest difference from the uninterrupted run " << worst);
    CHECK(worst < 1e-5);
  }
}

}  // namespace DDP_TEST_FILE
