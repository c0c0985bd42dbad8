#include "export_source.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "ddp/checkpoint/checkpoint_format.h"
#include "ddp/checkpoint/checkpointer.h"
#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/loop/prior_run.h"
#include "ddp/model/finite_weights.h"
#include "ddp/optim/optimizer_factory.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

constexpr int kLooks = 10;  // at checkpoints a running run may remove as they are read

// A checkpoint another run wrote (--checkpoint, or one copied in) may fit this run's model in every
// shape and still be another model (other heads, rope settings): its weights would go out under a
// config.json that describes them wrongly. Its manifest records the config it was written by.
void check_same_model(const std::string& manifest_path, const std::string& manifest, const TrainConfig& config,
                      const std::string& config_path, bool named) {
  const std::string written_by = read_run_identity(manifest).config;
  if (written_by.empty()) return;  // a checkpoint from before manifests recorded it
  auto changes = model_changes(written_by, to_yaml(config));
  // Another family's weights do not fit at all: its name is the difference to say, not the keys
  // that differ with it (its loading would fail on names, later, less clearly).
  for (const auto& change : changes)
    if (change.key == "model.name")
      throw UserError((named ? "--checkpoint: " : "") + manifest_path + " was written by a run of model.name " +
                      change.before + ", and " + config_path + " says " + change.after +
                      ": export it from its own run directory");
  if (!changes.empty())
    throw UserError((named ? "--checkpoint: " : "") + manifest_path + " was written by a run of another model than " +
                    config_path + " says (" + describe_changes(changes) +
                    "): its weights fit, but the export would describe them as the wrong model; export it from "
                    "its own run directory");
}

// The checkpoint --checkpoint names, else the newest one of the run older than `older_than` that
// verifies; none: nullopt.
std::optional<CheckpointInfo> chosen_checkpoint(const ExportArguments& args, TrainConfig config, int64_t older_than) {
  if (!args.checkpoint.empty()) {
    // The end's weights are no checkpoint (no manifest, no optimizer state): the default takes them.
    if (fs::path(args.checkpoint).filename() == "model.pt" && fs::is_regular_file(args.checkpoint))
      throw UserError("--checkpoint: " + args.checkpoint +
                      " is a run's model.pt, its end weights, not one of "
                      "its checkpoints: the run's directory holds them exported already (model.safetensors, "
                      "and config.json for a gpt or llama); --checkpoint names one in " +
                      (fs::path(args.run) / "checkpoints").string() +
                      ", and without it the newest there is exported (model.pt only when there is none)");
    config.checkpoint.resume = args.checkpoint;
  } else {
    config.checkpoint.resume = "auto";
  }
  Checkpointer checkpointer(config.checkpoint, (fs::path(args.run) / "checkpoints").string());
  try {
    return checkpointer.find_resume_point(older_than);
  } catch (const FileError& e) {  // the checkpointer names its key; here the user gave an option
    const std::string what = e.what(), key = "checkpoint.resume: ";
    throw FileError(what.rfind(key, 0) == 0 ? "--checkpoint: " + what.substr(key.size()) : what);
  }
}

}  // namespace

ExportSource read_export_source(const ExportArguments& args, const TrainConfig& config, const std::string& config_path,
                                const std::function<std::shared_ptr<Model>()>& fresh) {
  std::shared_ptr<Model> model = fresh();
  std::string source;
  int64_t step = -1;
  std::optional<CheckpointInfo> checkpoint;
  // Without --checkpoint, one that verifies but cannot be read (a manifest that disagrees with its
  // files) gives way to the one before it, as a run's resume does. A running run removes its
  // older checkpoints as it writes new ones (checkpoint.keep_last): one gone while it was read,
  // or a look that found none while the run wrote others, is looked for again, a few times.
  const Checkpointer listing(config.checkpoint, (fs::path(args.run) / "checkpoints").string());
  auto steps_listed = [&listing] {
    std::vector<int64_t> steps;
    for (const auto& listed : listing.list()) steps.push_back(listed.step);
    return steps;
  };
  // A finished run whose last step was no checkpoint step ended newer than its checkpoints: its
  // end (model.pt) is the model it trained, not its newest checkpoint (was: that, older, silently).
  const int64_t finished = args.checkpoint.empty() && fs::is_regular_file(fs::path(args.run) / "model.pt")
                               ? finished_at_step(args.run).value_or(-1)
                               : -1;  // -1: not a finished run, or --checkpoint named one
  auto end_is_newer = [finished](int64_t than) { return finished >= 0 && finished > than; };
  const auto listed_first = listing.list();
  for (int look = 1; step < 0 && !end_is_newer(listed_first.empty() ? -1 : listed_first.front().step) && look <= kLooks;
       ++look) {
    const std::vector<int64_t> listed = steps_listed();
    bool rotated = false;
    for (int64_t older_than = INT64_MAX;
         step < 0 && !rotated && (checkpoint = chosen_checkpoint(args, config, older_than));) {
      if (const char* delay = std::getenv("DDPRUN_TEST_EXPORT_READ_DELAY")) {  // a test rotates them here
        std::fprintf(stderr, "ddp-export: test: reading %s\n", checkpoint->manifest_path.c_str());
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
      }
      // The optimizer's state is read with the weights and dropped: an export holds the model alone.
      auto optimizer = make_optimizer(model->parameters(), config.optim, config.optim.lr);
      try {
        if (!fs::exists(checkpoint->manifest_path)) throw FileError(checkpoint->manifest_path + ": no such file");
        const std::string manifest = read_whole_file(checkpoint->manifest_path);  // gone since: caught below
        check_same_model(checkpoint->manifest_path, manifest, config, config_path, !args.checkpoint.empty());
        const int64_t loaded =
            load_whole_checkpoint(manifest, checkpoint->manifest_path,
                                  read_whole_file(common_file(manifest, checkpoint->manifest_path)), *model, *optimizer)
                .step;
        // A diverged run's checkpoint (its resume is refused too), not a model to hand out.
        if (!all_finite(model->parameters()))
          throw FileError("its weights are not all finite (the run diverged before step " + std::to_string(loaded) +
                          ")");
        step = loaded;
      } catch (const FileError& e) {
        if (!args.checkpoint.empty()) throw;
        model = fresh();  // nothing half-read goes out
        rotated = !fs::exists(checkpoint->manifest_path);
        if (rotated)
          spdlog::info(
              "{} was removed while it was read (a running run keeps only its newest checkpoints); "
              "looking again",
              checkpoint->manifest_path);
        else
          spdlog::warn("skipping checkpoint {}: {}; trying the previous one", checkpoint->manifest_path, e.what());
        older_than = checkpoint->step;
      }
    }
    if (step < 0 && !rotated && steps_listed() == listed) break;  // nothing changed: no other to find
  }
  const bool from_end = end_is_newer(step);
  if (step >= 0 && !from_end) {
    source = "the checkpoint of step " + std::to_string(step) + " (" + checkpoint->manifest_path + ")";
  } else {
    if (from_end) model = fresh();  // what a checkpoint put in it goes
    const std::string weights = (fs::path(args.run) / "model.pt").string();
    if (!fs::exists(weights))
      throw FileError(args.run +
                      " has neither a checkpoint nor model.pt to export (checkpoint.every_steps or "
                      "every_epochs keeps checkpoints; a finished run writes model.pt)");
    const auto listed = listing.list();
    if (!from_end && !listed.empty())
      spdlog::warn("no checkpoint in {} could be read; exporting {}", (fs::path(args.run) / "checkpoints").string(),
                   weights);
    model->load_weights(weights);
    source = weights;
    if (from_end)
      source = "the end of the run, step " + std::to_string(finished) + " (" + weights + "; " +
               (step >= 0 ? "its newest checkpoint that reads is of step " + std::to_string(step)
                : listed.empty() || listed.front().step < 0
                    ? std::string("it kept no checkpoint that reads")
                    : "its newest checkpoint is of step " + std::to_string(listed.front().step)) +
               ")";
  }
  return {model, from_end ? finished : step, source};
}

}  // namespace ddp
