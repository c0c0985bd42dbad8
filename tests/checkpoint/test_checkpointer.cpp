// The checkpointer: a bit-exact round trip of model, optimizer, progress and RNG; pruning; and that a
// torn, corrupt or foreign checkpoint is skipped or refused with a message naming it, never loaded.
#include <torch/torch.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/checkpoint/checkpointer.h"
#include "ddp/checkpoint/checkpoint_format.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/optim/optimizer_factory.h"
#include "support/log_capture.h"
#include "support/subprocess.h"
#include <catch2/catch.hpp>

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace fs = std::filesystem;
using namespace ddp::test;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;
using ddp::CheckpointConfig;
using ddp::Checkpointer;
using ddp::CheckpointInfo;
using ddp::FileError;
using ddp::TrainProgress;

namespace {

// A checkpoint loaded as the trainer loads one: from its file's bytes, here refused when another
// world size wrote it (the trainer's rule is laxer: see Note [Resume at another world size]).
TrainProgress load(const CheckpointInfo& checkpoint, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                   int world_size) {
  auto accept = [&](const TrainProgress& saved) {
    if (saved.world_size != world_size)
      throw FileError(checkpoint.data_path + " was written by world size " + std::to_string(saved.world_size) +
                      ", this run has " + std::to_string(world_size));
  };
  std::string manifest = fs::exists(checkpoint.manifest_path) ? ddp::read_whole_file(checkpoint.manifest_path) : "";
  return ddp::load_whole_checkpoint(manifest, checkpoint.manifest_path,
                                    ddp::read_whole_file(ddp::common_file(manifest, checkpoint.manifest_path)), model,
                                    optimizer, 0, accept);
}

// A small MLP and SGD with momentum, so a step leaves optimizer state that a load must restore.
struct Trainee {
  std::shared_ptr<ddp::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Trainee make_trainee(std::vector<int64_t> hidden = {8}) {
  ddp::ModelConfig model_config;
  model_config.name = "mlp";
  model_config.mlp.hidden = std::move(hidden);
  ddp::OptimConfig optim_config;
  optim_config.name = "sgd";
  optim_config.lr = 0.1;
  optim_config.momentum = 0.9;
  Trainee trainee;
  trainee.model = ddp::make_model(model_config);
  trainee.optimizer = ddp::make_optimizer(trainee.model->parameters(), optim_config, optim_config.lr);
  return trainee;
}

struct Batch {
  torch::Tensor images;
  torch::Tensor labels;
};

Batch make_batch() {
  torch::Generator generator = at::detail::createCPUGenerator(/*seed_in=*/1234);
  return {torch::randn({4, ddp::kInputChannels, ddp::kInputHeight, ddp::kInputWidth}, generator),
          torch::tensor({0, 3, 5, 9}, torch::kLong)};
}

void train_step(Trainee& trainee, const Batch& batch) {
  trainee.optimizer->zero_grad();
  auto loss = torch::nn::functional::cross_entropy(trainee.model->forward(batch.images), batch.labels);
  loss.backward();
  trainee.optimizer->step();
}

// A trainee that has taken one real step, so its momentum buffers exist.
Trainee trained_trainee() {
  auto trainee = make_trainee();
  train_step(trainee, make_batch());
  return trainee;
}

std::vector<torch::Tensor> snapshot(const torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, tensor] : ddp::python_state_dict(model)) out.push_back(tensor.detach().clone());
  return out;
}

bool bit_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].sizes() != b[i].sizes() || !torch::equal(a[i], b[i])) return false;
  return true;
}

TrainProgress progress_at(int64_t step, int64_t epoch = 0, int64_t batch_in_epoch = 0) {
  TrainProgress progress;
  progress.step = step;
  progress.epoch = epoch;
  progress.batch_in_epoch = batch_in_epoch;
  return progress;
}

CheckpointConfig checkpoint_config(int64_t keep_last, const std::string& resume = "auto") {
  CheckpointConfig config;
  config.keep_last = keep_last;
  config.resume = resume;
  return config;
}

// Saves one checkpoint per step in `steps` from the same trained model.
void save_steps(Checkpointer& checkpointer, Trainee& trainee, const std::vector<int64_t>& steps, int world_size = 1) {
  for (int64_t step : steps) ddp::save_whole_checkpoint(checkpointer, *trainee.model, *trainee.optimizer, progress_at(step), world_size);
}

std::vector<std::string> file_names(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int64_t> listed_steps(const Checkpointer& checkpointer) {
  std::vector<int64_t> steps;
  for (const auto& info : checkpointer.list()) steps.push_back(info.step);
  return steps;
}

CheckpointInfo info_for(const std::string& directory, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%010lld", static_cast<long long>(step));
  CheckpointInfo info;
  info.data_path = directory + "/" + name + ".pt";
  info.manifest_path = directory + "/" + name + ".json";
  info.step = step;
  info.world_size = 1;
  return info;
}

void flip_middle_byte(const std::string& path) {
  std::string bytes = read_file(path);
  REQUIRE(bytes.size() > 2);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
  write_file(path, bytes);
}

// While alive, no file of this process may grow past `bytes`: a write beyond fails (EFBIG) as on a
// full disk, and SIGXFSZ, which would kill the process, is ignored.
class WriteLimit {
 public:
  explicit WriteLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &previous_);
    signal_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit{bytes, previous_.rlim_max};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~WriteLimit() {
    setrlimit(RLIMIT_FSIZE, &previous_);
    signal(SIGXFSZ, signal_);
  }

 private:
  rlimit previous_{};
  sighandler_t signal_;
};

// Whether a temporary of `path` (path.tmp.XXXXXX) exists, even as a dangling link.
bool temporary_left(const std::string& path) {
  fs::path target(path);
  for (const auto& entry : fs::directory_iterator(target.parent_path()))
    if (entry.path().filename().string().rfind(target.filename().string() + ".tmp", 0) == 0) return true;
  return false;
}

// The message of the error of type E `action` throws; fails the test when it throws nothing.
template <typename E = FileError, typename Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an error, nothing was thrown");
  return "";
}

template <typename Action>
std::string file_error(Action&& action) {
  return error_of<FileError>(std::forward<Action>(action));
}

template <typename Action>
std::string io_error(Action&& action) {
  return error_of<ddp::IoError>(std::forward<Action>(action));
}

}  // namespace

TEST_CASE("save then load into a fresh model restores weights, optimizer, progress and RNG bit-exactly",
          "[checkpoint]") {
  TempDir tmp;
  torch::manual_seed(1);
  auto saved = trained_trainee();
  Checkpointer checkpointer(checkpoint_config(2), tmp.file("checkpoints"));
  ddp::save_whole_checkpoint(checkpointer, *saved.model, *saved.optimizer, progress_at(7, 2, 3), /*world_size=*/1);
  torch::Tensor random_after_save = torch::rand({16});

  torch::manual_seed(99);  // a different initialization and a different RNG position
  auto restored = make_trainee();
  REQUIRE(!bit_identical(snapshot(*saved.model), snapshot(*restored.model)));

  auto found = checkpointer.find_resume_point();
  REQUIRE(found.has_value());
  CHECK(found->step == 7);
  CHECK(found->world_size == 1);
  TrainProgress progress = load(*found, *restored.model, *restored.optimizer, /*world_size=*/1);
  CHECK(torch::equal(torch::rand({16}), random_after_save));
  CHECK(progress.step == 7);
  CHECK(progress.epoch == 2);
  CHECK(progress.batch_in_epoch == 3);
  CHECK(bit_identical(snapshot(*saved.model), snapshot(*restored.model)));
  CHECK(restored.optimizer->state().size() == saved.model->parameters().size());

  // Without the momentum buffers the next step would differ (checked on a control), so equal
  // weights after one more identical step mean the optimizer state came back too.
  auto control = make_trainee();
  {
    torch::NoGradGuard no_grad;
    auto from = saved.model->parameters();
    auto to = control.model->parameters();
    for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  auto batch = make_batch();
  train_step(saved, batch);
  train_step(restored, batch);
  train_step(control, batch);
  CHECK(bit_identical(snapshot(*saved.model), snapshot(*restored.model)));
  CHECK(!bit_identical(snapshot(*saved.model), snapshot(*control.model)));
}

TEST_CASE("keep_last=2 after saving steps 1 to 5 leaves steps 4 and 5, listed newest first", "[checkpoint]") {
  TempDir tmp;
  auto trainee = trained_trainee();
  Checkpointer checkpointer(checkpoint_config(2), tmp.file("checkpoints"));
  save_steps(checkpointer, trainee, {1, 2, 3, 4, 5});
  CHECK(file_names(checkpointer.directory()) ==
        std::vector<std::string>{"step_0000000004.json", "step_0000000004.pt", "step_0000000005.json",
                                 "step_0000000005.pt"});
  auto listed = checkpointer.list();
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].step == 5);
  CHECK(listed[1].step == 4);
  CHECK(listed[0].data_path == checkpointer.directory() + "/step_0000000005.pt");
  CHECK(listed[0].manifest_path == checkpointer.directory() + "/step_0000000005.json");
}

TEST_CASE("resume=auto with no checkpoint directory yet finds nothing", "[checkpoint]") {
  TempDir tmp;
  Checkpointer checkpointer(checkpoint_config(2), tmp.file("checkpoints"));
  CHECK(checkpointer.list().empty());
  CHECK(!checkpointer.find_resume_point().has_value());
}

TEST_CASE("resume=auto skips a torn or corrupt newest checkpoint and takes the previous one", "[checkpoint]") {
  TempDir tmp;
  auto trainee = trained_trainee();
  Checkpointer checkpointer(checkpoint_config(5), tmp.file("checkpoints"));
  save_steps(checkpointer, trainee, {1, 2, 3});
  const std::string dir = checkpointer.directory();
  auto newest = info_for(dir, 3);
  REQUIRE(verify_checkpoint(newest).empty());
  auto resume_step = [&] {
    auto found = checkpointer.find_resume_point();
    REQUIRE(found.has_value());
    CHECK(verify_checkpoint(*found).empty());
    return found->step;
  };

  SECTION("data file truncated to half") {
    fs::resize_file(newest.data_path, fs::file_size(newest.data_path) / 2);
    auto problem = verify_checkpoint(newest);
    CHECK_THAT(problem, Contains(newest.data_path) && Contains("truncated"));
    CHECK(resume_step() == 2);
  }
  SECTION("one byte flipped in the middle, same size") {
    auto size = fs::file_size(newest.data_path);
    flip_middle_byte(newest.data_path);
    REQUIRE(fs::file_size(newest.data_path) == size);
    auto problem = verify_checkpoint(newest);
    CHECK_THAT(problem, Contains(newest.data_path) && Contains("CRC"));
    CHECK(resume_step() == 2);
  }
  SECTION("the two newest damaged: falls back to the oldest") {
    fs::resize_file(newest.data_path, fs::file_size(newest.data_path) / 2);
    flip_middle_byte(info_for(dir, 2).data_path);
    CHECK(resume_step() == 1);
  }
  SECTION("every one damaged: none, each skip said (what follows is the caller's to say: a trainer's fresh start, "
          "ddp-export's model.pt)") {
    for (int step : {1, 2, 3}) flip_middle_byte(info_for(dir, step).data_path);
    LogCapture log;
    CHECK_FALSE(checkpointer.find_resume_point().has_value());
    CHECK(log.count("skipping checkpoint") == 3);
    CHECK(log.count("afresh") == 0);
  }
  SECTION("a manifest copied over a newer one's name: said and skipped (was: resumed as that step, at the older one)") {
    fs::copy_file(info_for(dir, 2).manifest_path, newest.manifest_path, fs::copy_options::overwrite_existing);
    LogCapture log;
    CHECK(resume_step() == 2);
    CHECK(log.count("ignoring " + newest.manifest_path +
                    ": it records step 2 but is named for step 3 (copied or "
                    "renamed by hand?)") == 1);
  }
  SECTION("data file missing") {
    fs::remove(newest.data_path);
    CHECK_THAT(verify_checkpoint(newest), Contains(newest.data_path));
    CHECK(resume_step() == 2);
  }
  SECTION("a data file without its manifest (a crash before the commit) is never picked") {
    fs::remove(newest.manifest_path);
    fs::copy_file(newest.data_path, dir + "/step_0000000009.pt");
    CHECK(listed_steps(checkpointer) == std::vector<int64_t>{2, 1});
    CHECK(resume_step() == 2);
  }
  SECTION("leftover .tmp files are ignored") {
    write_file(dir + "/step_0000000009.pt.tmp", "half a checkpoint");
    write_file(dir + "/step_0000000009.json.tmp", "{\"format_version\": 1, \"step\": 9");
    CHECK(listed_steps(checkpointer) == std::vector<int64_t>{3, 2, 1});
    CHECK(resume_step() == 3);
  }
  SECTION("a manifest that is not YAML") {
    write_file(newest.manifest_path, "{\"format_version\": 1, \"st");
    CHECK_THAT(verify_checkpoint(newest), Contains(newest.manifest_path));
    CHECK(resume_step() == 2);
  }
  SECTION("a manifest with a field missing or of the wrong type is reported, not thrown") {
    std::string manifest = read_file(newest.manifest_path);
    SECTION("bytes missing") {
      auto at = manifest.find("bytes: ");  // the common file's
      REQUIRE(at != std::string::npos);
      manifest.replace(at, 5, "bztes");
    }
    SECTION("crc32 not a number") {
      auto at = manifest.find("crc32: ");
      REQUIRE(at != std::string::npos);
      manifest.insert(at + 7, "x");
    }
    write_file(newest.manifest_path, manifest);
    std::string problem;
    REQUIRE_NOTHROW(problem = verify_checkpoint(newest));
    CHECK_THAT(problem, Contains(newest.manifest_path));
    CHECK(resume_step() == 2);
  }
}

TEST_CASE("resume=never refuses an earlier run's checkpoints, resume=PATH takes exactly that one or fails naming it",
          "[checkpoint]") {
  TempDir tmp;
  auto trainee = trained_trainee();
  const std::string dir = tmp.file("checkpoints");
  {
    Checkpointer writer(checkpoint_config(5), dir);
    save_steps(writer, trainee, {1, 2, 3});
  }
  const std::string base = dir + "/step_0000000002";

  SECTION("never refuses a folder that holds an earlier run's checkpoints, naming it") {
    CHECK_THROWS_WITH(Checkpointer(checkpoint_config(5, "never"), dir).find_resume_point(),
                      Catch::Contains("checkpoint.resume is never, but " + dir) &&
                          Catch::Contains("step_0000000003.pt"));
    TempDir empty;
    CHECK(!Checkpointer(checkpoint_config(5, "never"), empty.path()).find_resume_point().has_value());
  }
  SECTION("a path, with or without extension") {
    for (const std::string& given : {base, base + ".pt", base + ".json"}) {
      INFO(given);
      auto found = Checkpointer(checkpoint_config(5, given), dir).find_resume_point();
      REQUIRE(found.has_value());
      CHECK(found->data_path == base + ".pt");
      CHECK(found->manifest_path == base + ".json");
      auto restored = make_trainee();
      Checkpointer checkpointer(checkpoint_config(5, given), dir);
      CHECK(load(*found, *restored.model, *restored.optimizer, 1).step == 2);
    }
  }
  SECTION("a file of a checkpoint in several files names its manifest, step_N.json") {
    // Was: "step_N.common.pt has no manifest step_N.common.json", a file no save writes.
    for (const std::string& given : {base + ".common.pt", base + ".shard-0-of-2.pt"})
      CHECK(ddp::checkpoint_at(given).manifest_path == base + ".json");
    CHECK(ddp::checkpoint_at(dir + "/my.model.pt").manifest_path == dir + "/my.model.json");  // not a step's
  }
  SECTION("a path to a missing checkpoint") {
    const std::string missing = dir + "/step_0000000042";
    CHECK_THAT(file_error([&] { Checkpointer(checkpoint_config(5, missing), dir).find_resume_point(); }),
               Equals("checkpoint.resume: " + missing + ": no such file"));
  }
  SECTION("a directory") {
    CHECK_THAT(file_error([&] { Checkpointer(checkpoint_config(5, dir), dir).find_resume_point(); }),
               StartsWith("checkpoint.resume: " + dir + " is a directory: name a checkpoint in it"));
  }
  SECTION("a file whose manifest names another: renamed together, or a manifest copied beside it") {
    fs::copy_file(base + ".pt", dir + "/best.pt");
    fs::copy_file(base + ".json", dir + "/best.json");
    fs::copy_file(dir + "/step_0000000001.pt", dir + "/older.pt");  // another step's state
    fs::copy_file(base + ".json", dir + "/older.json");
    for (const std::string& given : {dir + "/best.pt", dir + "/older.pt"}) {
      INFO(given);
      const std::string manifest = given.substr(0, given.size() - 3) + ".json";
      CHECK_THAT(file_error([&] { Checkpointer(checkpoint_config(5, given), dir).find_resume_point(); }),
                 Equals("checkpoint.resume: " + manifest + " is the manifest of step_0000000002.pt, not of " +
                        fs::path(given).filename().string() +
                        ": a checkpoint is its manifest and the files it names, renamed together if at all; name "
                        "the manifest to resume from what it names"));
    }
    // One shard of a checkpoint in several files names it: its manifest lists that file.
    fs::create_directories(dir + "/sharded");
    fs::copy_file(base + ".pt", dir + "/sharded/step_0000000002.pt");
    std::string manifest = read_file(base + ".json");
    REQUIRE(manifest.find("\nshards:\n") != std::string::npos);
    manifest.replace(manifest.find("\nshards:\n"), 9, "\nshards:\n  - file: step_0000000002.shard-0-of-2.pt\n");
    write_file(dir + "/sharded/step_0000000002.json", manifest);
    write_file(dir + "/sharded/step_0000000002.shard-0-of-2.pt", "a shard");
    auto shard =
        Checkpointer(checkpoint_config(5, dir + "/sharded/step_0000000002.shard-0-of-2.pt"), dir).find_resume_point();
    REQUIRE(shard.has_value());
    CHECK(shard->manifest_path == dir + "/sharded/step_0000000002.json");
    // Named by its manifest, it is what the manifest names.
    auto found = Checkpointer(checkpoint_config(5, dir + "/best.json"), dir).find_resume_point();
    REQUIRE(found.has_value());
    auto restored = make_trainee();
    CHECK(load(*found, *restored.model, *restored.optimizer, 1).step == 2);
  }
  SECTION("a path to a truncated checkpoint") {
    fs::resize_file(base + ".pt", fs::file_size(base + ".pt") / 2);
    CHECK_THAT(file_error([&] { Checkpointer(checkpoint_config(5, base), dir).find_resume_point(); }),
               Contains(base) && Contains("truncated"));
  }
  SECTION("a path to a corrupt checkpoint") {
    flip_middle_byte(base + ".pt");
    CHECK_THAT(file_error([&] { Checkpointer(checkpoint_config(5, base + ".pt"), dir).find_resume_point(); }),
               Contains(base) && Contains("CRC"));
  }
  SECTION("a manifest whose step was edited is refused as it is read, naming both steps") {
    std::string manifest = read_file(base + ".json");
    const auto at = manifest.find("step: 2\n");
    REQUIRE(at != std::string::npos);
    write_file(base + ".json", manifest.replace(at, 8, "step: 99\n"));
    auto found = Checkpointer(checkpoint_config(5, base + ".json"), dir).find_resume_point();
    REQUIRE(found.has_value());
    auto restored = make_trainee();
    CHECK_THAT(file_error([&] { load(*found, *restored.model, *restored.optimizer, 1); }),
               Equals(base + ".json says step 99, but " + base + ".pt holds step 2: the manifest was edited, or is "
                      "another checkpoint's"));
  }
  SECTION("a path to garbage with no manifest") {
    const std::string garbage = tmp.file("garbage.pt");
    write_file(garbage, "this is not a checkpoint");
    CHECK_THAT(file_error([&] { Checkpointer(checkpoint_config(5, garbage), dir).find_resume_point(); }),
               Contains(tmp.file("garbage")));
  }
}

TEST_CASE("load refuses another world size, another model or a non-checkpoint, naming the difference",
          "[checkpoint]") {
  TempDir tmp;
  auto trainee = trained_trainee();
  Checkpointer checkpointer(checkpoint_config(5), tmp.file("checkpoints"));
  save_steps(checkpointer, trainee, {1}, /*world_size=*/2);
  auto info = info_for(checkpointer.directory(), 1);

  SECTION("a refusal before anything is restored (another world size here)") {
    auto restored = make_trainee();
    auto before = snapshot(*restored.model);
    CHECK_THAT(file_error([&] { load(info, *restored.model, *restored.optimizer, /*world_size=*/4); }),
               Contains(info.data_path) && Contains("world size 2") && Contains("has 4"));
    CHECK(bit_identical(before, snapshot(*restored.model)));
  }
  SECTION("another model") {
    auto wider = make_trainee({16});
    auto before = snapshot(*wider.model);
    CHECK_THAT(file_error([&] { load(info, *wider.model, *wider.optimizer, /*world_size=*/2); }),
               Contains(info.data_path) && Contains("layers.0.weight"));
    CHECK(bit_identical(before, snapshot(*wider.model)));
  }
  SECTION("garbage bytes under a manifest that vouches for them") {
    std::string garbage(4096, '\0');
    for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 7919) % 251);
    auto forged = info_for(checkpointer.directory(), 9);
    write_file(forged.data_path, garbage);
    uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(garbage.data()),
                      static_cast<uInt>(garbage.size()));
    write_file(forged.manifest_path, "{\"format_version\": 1, \"step\": 9, \"epoch\": 0, \"world_size\": 2, "
                                     "\"bytes\": " + std::to_string(garbage.size()) +
                                         ", \"crc32\": " + std::to_string(crc) + "}\n");
    auto found = checkpointer.find_resume_point();
    REQUIRE(found.has_value());
    REQUIRE(found->step == 9);  // it verifies: the manifest matches, only loading can tell
    auto restored = make_trainee();
    auto before = snapshot(*restored.model);
    CHECK_THAT(file_error([&] { load(*found, *restored.model, *restored.optimizer, 2); }),
               Contains(forged.data_path));
    CHECK(bit_identical(before, snapshot(*restored.model)));
  }
  SECTION("a torch archive that is not a checkpoint") {
    auto other = info_for(checkpointer.directory(), 9);
    torch::serialize::OutputArchive archive;
    archive.write("weights", torch::ones({3}));
    archive.save_to(other.data_path);
    auto restored = make_trainee();
    CHECK_THAT(file_error([&] { load(other, *restored.model, *restored.optimizer, 2); }),
               Contains(other.data_path));
  }
}

TEST_CASE("a failed save throws IoError naming the path and leaves the previous checkpoint usable",
          "[checkpoint]") {
  TempDir tmp;
  auto trainee = trained_trainee();
  const std::string dir = tmp.file("checkpoints");
  Checkpointer checkpointer(checkpoint_config(2), dir);
  save_steps(checkpointer, trainee, {1});
  const auto checkpoint_bytes = fs::file_size(info_for(dir, 1).data_path);
  auto previous_is_intact = [&] {
    CHECK(verify_checkpoint(info_for(dir, 1)).empty());
    auto found = checkpointer.find_resume_point();
    REQUIRE(found.has_value());
    CHECK(found->step == 1);
  };

  SECTION("read-only checkpoint directory") {
    REQUIRE(chmod(dir.c_str(), 0555) == 0);
    struct RestoreMode {
      std::string path;
      ~RestoreMode() { chmod(path.c_str(), 0755); }
    } restore{dir};
    const std::string probe = dir + "/probe";
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      WARN("skipped the read-only directory check: this user (root?) can write to a 0555 directory");
    } else {
      // Permissions: a usage error, which a restart would only repeat.
      CHECK_THAT(file_error([&] { ddp::save_whole_checkpoint(checkpointer, *trainee.model, *trainee.optimizer, progress_at(2), 1); }),
                 Contains(dir));
      previous_is_intact();
    }
  }
  SECTION("checkpoint directory under a regular file (ENOTDIR for every user): a usage error, which a restart "
          "would only repeat") {
    write_file(tmp.file("afile"), "a file, not a directory");
    const std::string impossible = tmp.file("afile/checkpoints");
    Checkpointer doomed(checkpoint_config(2), impossible);
    CHECK_THAT(file_error([&] { ddp::save_whole_checkpoint(doomed, *trainee.model, *trainee.optimizer, progress_at(2), 1); }),
               Contains(impossible));
    previous_is_intact();
  }
  SECTION("no room for the data file") {
    const std::string data = info_for(dir, 2).data_path;
    {
      WriteLimit full(checkpoint_bytes / 2);
      CHECK_THAT(io_error([&] { ddp::save_whole_checkpoint(checkpointer, *trainee.model, *trainee.optimizer, progress_at(2), 1); }),
                 Contains(data) && Contains("File too large"));
    }
    CHECK(!temporary_left(data));
    CHECK(listed_steps(checkpointer) == std::vector<int64_t>{1});
    previous_is_intact();
  }
  SECTION("the manifest cannot be committed: the new data file is not a checkpoint") {
    const std::string manifest = info_for(dir, 2).manifest_path;
    fs::create_directory(manifest);  // a non-empty directory in the way of the rename
    write_file(manifest + "/inside", "x");
    CHECK_THAT(io_error([&] { ddp::save_whole_checkpoint(checkpointer, *trainee.model, *trainee.optimizer, progress_at(2), 1); }),
               Contains(manifest));
    CHECK(!temporary_left(manifest));
    auto steps = listed_steps(checkpointer);  // the directory in the way is listed as unreadable (-1)
    CHECK(std::find(steps.begin(), steps.end(), 2) == steps.end());
    previous_is_intact();
  }
}

TEST_CASE("write_file_atomically replaces a file whole, or leaves the old one and no temporary", "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("state.txt");
  write_file(path, "old contents");

  SECTION("success, with the mode asked for") {
    ddp::write_file_atomically(path, "new contents", 0640);
    CHECK(read_file(path) == "new contents");
    CHECK(!temporary_left(path));
    CHECK(ddp::read_whole_file(path) == "new contents");
    CHECK((fs::status(path).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  }
  SECTION("a symlink planted at the old temporary name is neither followed nor removed") {
    const std::string victim = tmp.file("victim");
    write_file(victim, "precious");
    fs::create_symlink(victim, path + ".tmp");
    ddp::write_file_atomically(path, "new");
    CHECK(read_file(path) == "new");
    CHECK(read_file(victim) == "precious");
    CHECK(fs::is_symlink(path + ".tmp"));
  }
  SECTION("the write fails (no room)") {
    {
      WriteLimit full(4);
      CHECK_THAT(io_error([&] { ddp::write_file_atomically(path, "new contents"); }),
                 Contains(path) && Contains("write"));
    }
    CHECK(read_file(path) == "old contents");
    CHECK(!temporary_left(path));
  }
  SECTION("streamed: the producer's bytes in order; a producer that throws leaves the old file and no temporary") {
    ddp::write_file_atomically(path, [](const ddp::ByteSink& sink) {
      sink("new ", 4);
      sink("contents", 8);
    });
    CHECK(read_file(path) == "new contents");
    CHECK_THROWS_WITH(ddp::write_file_atomically(path,
                                                 [](const ddp::ByteSink& sink) {
                                                   sink("half", 4);
                                                   throw std::runtime_error("the archive broke");
                                                 }),
                      "the archive broke");
    CHECK(read_file(path) == "new contents");
    CHECK(!temporary_left(path));
  }
  SECTION("the rename fails (a directory is in the way)") {
    const std::string blocked = tmp.file("blocked");
    fs::create_directory(blocked);
    write_file(blocked + "/inside", "keeps the directory non-empty");
    CHECK_THAT(io_error([&] { ddp::write_file_atomically(blocked, "new contents"); }), Contains(blocked));
    CHECK(fs::is_directory(blocked));
    CHECK(read_file(blocked + "/inside") == "keeps the directory non-empty");
    CHECK(!temporary_left(blocked));
  }
  SECTION("the open fails (no such directory)") {
    const std::string nowhere = tmp.file("missing/state.txt");
    CHECK_THAT(io_error([&] { ddp::write_file_atomically(nowhere, "x"); }), Contains(nowhere));
    CHECK(!fs::exists(tmp.file("missing")));
  }
  SECTION("read_whole_file names a missing file") {
    CHECK_THAT(file_error([&] { ddp::read_whole_file(tmp.file("absent")); }), Contains(tmp.file("absent")));
  }
  SECTION("open_for_append refuses a symlink, naming it") {
    const std::string link = tmp.file("log");
    fs::create_symlink(path, link);
    CHECK_THAT(io_error([&] { ddp::open_for_append(link); }), Contains(link) && Contains("symbolic link"));
    CHECK(read_file(path) == "old contents");
  }
}

TEST_CASE("a save removes a data file no manifest commits and stray temporaries, and a garbage manifest is skipped",
          "[checkpoint]") {
  TempDir tmp;
  auto trainee = trained_trainee();
  const std::string dir = tmp.file("checkpoints");
  Checkpointer checkpointer(checkpoint_config(5), dir);
  save_steps(checkpointer, trainee, {1});
  // A crash between data file and manifest at step 2, and one inside an atomic write.
  write_file(info_for(dir, 2).data_path, "a data file whose manifest never came");
  write_file(dir + "/step_0000000003.json.tmp.Ab12Cd", "half a manifest");
  // A kill inside an earlier try at the very step saved now (the run resumed from before it).
  write_file(dir + "/step_0000000004.pt.tmp.Ef34Gh", "half a data file");
  save_steps(checkpointer, trainee, {4});
  CHECK_FALSE(fs::exists(info_for(dir, 2).data_path));
  CHECK_FALSE(fs::exists(dir + "/step_0000000003.json.tmp.Ab12Cd"));
  CHECK_FALSE(fs::exists(dir + "/step_0000000004.pt.tmp.Ef34Gh"));
  CHECK(verify_checkpoint(info_for(dir, 4)).empty());
  CHECK(verify_checkpoint(info_for(dir, 1)).empty());
  // The newest manifest replaced by garbage: the one before it is the resume point.
  write_file(info_for(dir, 4).manifest_path, "\x01\x02 not yaml: [");
  auto found = checkpointer.find_resume_point();
  REQUIRE(found.has_value());
  CHECK(found->step == 1);
}

}  // namespace DDP_TEST_FILE
