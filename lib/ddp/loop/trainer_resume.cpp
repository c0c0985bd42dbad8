// Trainer's resume: the checkpoint to resume from chosen, verified and read by rank 0 (Note
// [Resume from rank 0]), checked against this run's config, data and layout, and the run's
// progress taken from it.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "ddp/comm/collectives.h"
#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/loop/prior_run.h"
#include "ddp/loop/resume_check.h"
#include "ddp/loop/trainer.h"
#include "ddp/model/batch_statistics.h"
#include "ddp/model/finite_weights.h"
#include "ddp/optim/optimizer_factory.h"

namespace ddp {

bool Trainer::resume() {
  // Note [Resume from rank 0]: rank 0 alone chooses and verifies the checkpoint, reads it, and
  // broadcasts its bytes; every rank loads those. The ranks then resume from the same state even
  // when their nodes hold different files at that path (node-local storage, a stale copy), and
  // no rank but 0 needs the file at all. A checkpoint in a file per writer is the exception: each
  // rank reads the files it needs (Note [Checkpoint format]); rank 0 sends the manifest and the
  // common file.
  const Communicator& world = plan_->world();
  const bool named = config_.checkpoint.resume != "auto" && config_.checkpoint.resume != "never";
  for (int64_t older_than = INT64_MAX;;) {
    std::string path, manifest, bytes, refusal;
    int64_t rewind_to = -1;  // rank 0's: set aside what is past it once the checkpoint is known to fit
    if (world.rank == 0) {
      std::optional<CheckpointInfo> found;
      bool rewinds = false;  // to the named checkpoint: the later ones are another history's
      if (named && later_attempt_.later()) {
        // Note [A named checkpoint rewinds]: a restart continues this job's own progress past the
        // named checkpoint, which keep_last may have pruned since.
        auto own = checkpointer_->newest_after(-1);
        try {
          found = checkpointer_->find_resume_point(older_than);
        } catch (const FileError&) {
          if (!own) throw;
        }
        if (own && (!found || own->step > found->step)) {
          spdlog::info(
              "{} resumes its own newest checkpoint, step {}, not {} that checkpoint.resume names: the job "
              "trained past it",
              later_attempt_.name(), own->step, found ? "step " + std::to_string(found->step) : "the one");
          found = own;
        }
      } else {
        found = checkpointer_->find_resume_point(older_than);
        rewinds = named;
      }
      if (found) {
        // The next try is older than this one by the step find_resume_point compares, its manifest's,
        // whatever the file name or the state says: a manifest that disagrees with them cannot
        // bring the same checkpoint back forever.
        older_than = found->step;
        path = found->manifest_path;
        manifest = read_whole_file(path);
        refusal = run_identity_refusal(read_run_identity(manifest), checkpointer_->run_identity(), path);
        if (refusal.empty()) bytes = read_whole_file(common_file(manifest, path));
        if (refusal.empty() && rewinds) rewind_to = found->step;
      } else if (const std::size_t saved = checkpointer_->list().size();
                 config_.checkpoint.resume == "auto" && saved > 0 &&
                 !(later_attempt_.later() && later_attempt_.node_count > 1)) {
        // None readable (a rank's files on another node's disk, a damaged disk): training from
        // step 0 here would prune them (checkpoint.keep_last), files that may come back, and write
        // over the run's metrics. The user decides. (A later attempt on several nodes, an elastic
        // round whose nodes changed, goes on from step 0 as below: its job has no user to ask, and
        // with node-local run directories another node's checkpoint files are gone for it.)
        refusal = "none of the " + std::to_string(saved) + " checkpoint(s) in " + checkpointer_->directory() +
                  " could be resumed from (each one's cause is said above); training from step 0 there would "
                  "remove them (checkpoint.keep_last) and write over the run's record: restore their files (a "
                  "rank's files kept on another node's disk?), or, to start afresh, move " +
                  output_dir_of(config_.run) + " aside or give another run.output_dir";
      } else if (config_.checkpoint.resume == "auto" && later_attempt_.later()) {
        // Nor a restart's, or an elastic round's, with none to resume: with node-local run
        // directories, a rank 0 on another node than before finds none.
        spdlog::warn(
            "{} (a restart, an elastic round or a requeue) finds no checkpoint in {}: training starts "
            "from step 0{}",
            later_attempt_.name(), checkpointer_->directory(),
            later_attempt_.node_count > 1 ? "; rank 0 writes checkpoints on its own node, so give every node "
                                            "one run.output_dir on storage they share"
                                          : "");
      } else if (auto orphans = checkpointer_->without_manifest();
                 config_.checkpoint.resume == "auto" && !orphans.empty()) {
        // Nor after one whose checkpoint lost its manifest (removed, or a save cut short): its data
        // alone cannot be verified, and is not resumed from. Named by its step: its files are one.
        const std::string newest = std::filesystem::path(orphans.back()).filename().string();
        spdlog::warn(
            "{}/{} has no manifest ({}.json) and cannot be resumed from (a save cut short, or its manifest "
            "removed); training starts afresh from step 0",
            checkpointer_->directory(), newest, newest.substr(0, newest.find('.')));
      }
    }
    broadcast_bytes(world, refusal, 0);
    if (!refusal.empty()) throw UserError(refusal);
    broadcast_bytes(world, path, 0);
    broadcast_bytes(world, manifest, 0);
    broadcast_bytes(world, bytes, 0);
    if (bytes.empty() && holds_diverged_state_)  // no step 0 from a diverged checkpoint's weights
      throw UserError("every checkpoint of " + output_dir_of(config_.run) +
                      " that could be read holds weights that are not all finite (the run diverged; each is said "
                      "above): start a new run (another run.output_dir), or remove its checkpoints to start afresh");
    if (bytes.empty()) return false;
    if (resume_from(path, manifest, bytes, rewind_to)) return true;
  }
}

// Note [A named checkpoint rewinds]: `checkpoint.resume: PATH` to an earlier step than the run
// directory's newest (a loss spike, say, rewound) starts another history there. The checkpoints
// of the old one past that step would otherwise stay: `resume: auto` (a later run, ddp-export)
// would pick the old history's newest over the new one's, a restart would go back to PATH again,
// and keep_last would count them. They are moved aside, kept for the user, out of every search.
void Trainer::set_aside_checkpoints_after(int64_t step) const {
  auto [steps, folder] = checkpointer_->set_aside_after(step);
  if (steps.empty()) return;
  std::string list;
  for (int64_t s : steps) list += (list.empty() ? "" : ", ") + std::to_string(s);
  spdlog::warn(
      "checkpoint.resume rewinds to step {}: the run directory's checkpoints of a later step ({}) belong to "
      "the history it leaves, and are moved to {}, where resume: auto never looks",
      step, list, folder);
}

bool Trainer::resume_from(const std::string& path, const std::string& manifest, const std::string& common,
                          int64_t rewind_to) {
  const Communicator& world = plan_->world();
  std::optional<CheckpointReader> parsed;
  try {
    parsed.emplace(manifest, path, common);
  } catch (const FileError& e) {  // the same manifest on every rank: all go back alike
    if (config_.checkpoint.resume != "auto") throw;
    if (world.rank == 0) spdlog::warn("skipping checkpoint {}: {}; trying the previous one", path, e.what());
    return false;
  }
  CheckpointReader& reader = *parsed;
  // A whole checkpoint is rank 0's file, which the others only heard of.
  const std::string source = reader.single_file() && world.rank != 0 ? "rank 0's checkpoint" : reader.source();
  check_resume_layout(reader.progress(), step_shape_, config_, source);
  CheckpointLayout layout = checkpoint_layout(*parallel_, *plan_, task_->model(), config_.checkpoint.format);
  layout.whole_optimizer = [this](const std::vector<torch::Tensor>& whole) {  // format 1's whole checkpoints
    return make_optimizer(whole, config_.optim, scaled_lr(config_.optim, static_cast<int>(step_shape_.lr_ranks)));
  };
  reader.check_fits(layout, task_->model(), *optimizer_);
  std::string problem = reader.read_pieces(layout);
  // Every rank restores, or none: the first rank that could not read its pieces says why.
  auto failed = torch::zeros({world.world_size}, torch::kDouble);
  if (!problem.empty()) failed[world.rank] = 1;
  failed = all_reduce_sum(world, failed);
  for (int r = 0; r < world.world_size; ++r) {
    if (failed[r].item<double>() == 0) continue;
    broadcast_bytes(world, problem, r);
    problem = "rank " + std::to_string(r) + ": " + problem;
    if (config_.checkpoint.resume != "auto") throw FileError("checkpoint.resume: " + problem);
    if (world.rank == 0) spdlog::warn("skipping checkpoint {}: {}; trying the previous one", path, problem);
    return false;
  }
  check_not_behind(reader.progress(), reader.source());
  reader.restore(layout, task_->model(), *optimizer_, world.rank);
  plan_->after_restore(*optimizer_);
  plan_->after_optimizer_step();  // the restored runs where the layout wants them: every rank's whole parameters
  // A run that diverged wrote checkpoints of non-finite weights before its loss said so (it reads the
  // loss at log steps): resumed, it would only diverge again. Each rank looks at what its optimizer
  // steps: under a layout that splits the model, the model's own tensors may hold no values here.
  std::vector<torch::Tensor> stepped;
  for (const auto& group : optimizer_->param_groups())
    stepped.insert(stepped.end(), group.params().begin(), group.params().end());
  auto non_finite = torch::full({1}, all_finite(stepped) ? 0.0 : 1.0, torch::kDouble);
  if (all_reduce_sum(world, non_finite)[0].item<double>() > 0) {
    const std::string problem =
        "its weights are not all finite (the run diverged before step " + std::to_string(reader.progress().step) + ")";
    if (config_.checkpoint.resume != "auto")
      throw UserError("checkpoint.resume: " + reader.source() + ": " + problem + "; name an earlier one");
    if (world.rank == 0) spdlog::warn("skipping checkpoint {}: {}; trying the previous one", path, problem);
    holds_diverged_state_ = true;  // restored: only another checkpoint's restore replaces it
    return false;
  }
  holds_diverged_state_ = false;
  // After every check (a refused or unreadable checkpoint leaves the directory as it was), before
  // training: a job that fails from here on must not find the old history on its restart.
  if (rewind_to >= 0) set_aside_checkpoints_after(rewind_to);
  resumed(reader.progress(), reader.source(), reader.single_file() ? "" : ", " + reader.describe());
  return true;
}

void Trainer::check_not_behind(const TrainProgress& loaded, const std::string& path) const {
  // A run shortened below what it has trained cannot be shortened: refused before config.yaml,
  // metrics or model.pt would say it trained that length.
  auto behind = [&](const std::string& key, int64_t value, const std::string& unit, int64_t at) {
    return ConfigError(key + " " + std::to_string(value) + " is behind " + unit + " " + std::to_string(at) +
                       " of the checkpoint it resumes (" + path + "): the run has trained past it. To go on, raise " +
                       key + " to " + std::to_string(at) +
                       " or more; to train less, start a new run (another "
                       "run.output_dir)");
  };
  if (config_.train.max_steps > 0 && loaded.step > config_.train.max_steps)
    throw behind("train.max_steps", config_.train.max_steps, "step", loaded.step);
  // `epoch` counts the epochs done: a checkpoint part-way into the next has begun it, the epoch
  // the log counts from 1 (was let through, and "finished" with a model from further on).
  const int64_t epoch_begun = loaded.epoch + (loaded.batch_in_epoch > 0 ? 1 : 0);
  if (epoch_begun > config_.train.epochs) throw behind("train.epochs", config_.train.epochs, "epoch", epoch_begun);
}

void Trainer::resumed(const TrainProgress& loaded, const std::string& path, const std::string& what) {
  progress_ = loaded;
  // Micro-batches of the saved size, counted in this run's (the same when world × batch is).
  if (loaded.world_size > 0 && loaded.batch_size > 0)
    progress_.batch_in_epoch =
        loaded.batch_in_epoch * loaded.world_size * loaded.batch_size / (replicas() * config_.train.batch_size);
  progress_.batch_size = config_.train.batch_size;
  progress_.accum_steps = config_.train.grad_accum_steps;
  progress_.lr_ranks = step_shape_.lr_ranks;
  last_eval_step_ = progress_.step;          // evaluated (or not) before that checkpoint was written, but:
  eval_after_resume_ = loaded.eval_pending;  // Note [An evaluation cut short]
  progress_.eval_pending = false;
  checkpointer_->mark_saved(progress_.step);
  if (plan_->world().rank == 0)
    spdlog::info("resumed from {} at step {} ({}{}{}){}{}", path, progress_.step, epoch_text(progress_),
                 progress_.batch_in_epoch > 0
                     ? fmt::format(", after {} of its {} batches", progress_.batch_in_epoch, batches_per_epoch())
                     : "",
                 what,
                 loaded.world_size == replicas()
                     ? ""
                     : fmt::format(", written by {} replica{} of batch {}{}: the same {} samples per step",
                                   loaded.world_size, loaded.world_size == 1 ? "" : "s", loaded.batch_size,
                                   loaded.accum_steps > 1 ? fmt::format(" × {} micro-steps", loaded.accum_steps) : "",
                                   step_shape_.samples()),  // check_resume_layout made them this run's
                 changed_since_.empty() ? "" : "; changed since that run: " + changed_since_);
  warn_if_lr_rises(loaded.lr);
  warn_if_batch_statistics_regrouped(loaded);
}

void Trainer::warn_if_batch_statistics_regrouped(const TrainProgress& loaded) const {
  // BatchNorm normalises by each micro-batch's statistics: the same samples a step, grouped into
  // other micro-batches, train otherwise. SyncBatchNorm's are the replicas' micro-batches together,
  // which the same replicas × batch groups alike.
  const BatchStatistics batch_norms = batch_statistics_of(task_->model());
  const bool synced = batch_norms.all_synced;
  const int64_t accum = std::max<int64_t>(loaded.accum_steps, 1);
  const bool regrouped =
      (loaded.accum_steps > 0 && loaded.accum_steps != config_.train.grad_accum_steps) ||  // 0: not recorded
      (synced ? loaded.world_size * loaded.batch_size != replicas() * config_.train.batch_size
              : loaded.world_size != replicas() || loaded.batch_size != config_.train.batch_size);
  if (plan_->world().rank != 0 || loaded.world_size <= 0 || !batch_norms.any() || !regrouped) return;
  spdlog::warn(
      "the model's {} normalises each micro-batch by its own statistics (BatchNorm), and this run groups the "
      "samples of a step otherwise than the checkpoint's run ({} replica(s) × batch {} × {} micro-step(s), now {} × "
      "{} × {}): it trains on, but not to the weights that run would have reached",
      batch_norms.first_layer, loaded.world_size, loaded.batch_size, accum, replicas(), config_.train.batch_size,
      config_.train.grad_accum_steps);
}

void Trainer::warn_if_lr_rises(double last_lr) const {
  // A schedule tied to the run's length (a cosine without schedule.decay_steps) stretches when
  // train.max_steps is raised on resume, which takes the lr back up: never silently.
  const double next_lr = schedule_->lr_at(progress_.step);
  if (plan_->world().rank != 0 || last_lr < 0 || progress_.step < config_.schedule.warmup_steps ||
      next_lr <= last_lr * (1 + 1e-9))
    return;
  const bool stretched = config_.schedule.name == "cosine" && config_.schedule.decay_steps == 0;
  // A decay that had ended (a finished run lengthened) has nothing left to continue: kept, it
  // trains every added step at schedule.min_lr, which the advice must say.
  const std::string why =
      stretched ? fmt::format(
                      ", as the cosine now spans this run's {} steps; to continue the saved run's decay, set "
                      "schedule.decay_steps to the step it was to end at (its train.max_steps; or, run by "
                      "epochs, its train.epochs times {} steps an epoch). If the saved run had finished, its "
                      "decay had ended there, and every added step would train at schedule.min_lr {:.6g}; "
                      "unset, the added steps decay a second time",
                      total_steps(), steps_per_epoch(), config_.schedule.min_lr)
                : ", as this run's schedule.* gives it";
  spdlog::warn("the learning rate goes back up on resume: step {} had {:.6g}, step {} gets {:.6g}{}", progress_.step,
               last_lr, progress_.step + 1, next_lr, why);
}

}  // namespace ddp
