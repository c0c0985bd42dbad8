#include "ddp/loop/resume_check.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "ddp/common/error.h"
#include "ddp/loop/global_batch.h"
#include "ddp/loop/prior_run.h"
#include "ddp/task/task.h"

namespace ddp {
namespace {

constexpr const char* kRestartHint = "; or start afresh in another run.output_dir";

std::set<std::string> lines_of(const std::string& text) {
  std::set<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.insert(line);
  return lines;
}

// "a; b" for the lines of `from` that `other` lacks.
std::string lines_missing(const std::set<std::string>& from, const std::set<std::string>& other) {
  std::string text;
  for (const auto& line : from)
    if (!other.count(line)) text += (text.empty() ? "" : "; ") + line;
  return text.empty() ? "-" : text;
}

std::string number(int64_t value) { return std::to_string(value); }

// Whether a run of `shape` trains the checkpoint's steps from where it stopped: the same samples a
// step, and micro-batches that fall on its position (samples into the epoch).
bool resumes(int64_t samples, int64_t position, const StepShape& shape) {
  return shape.samples() == samples && position % (shape.replicas * shape.batch_size) == 0;
}

// A setting that, followed, resumes the checkpoint written by `world` × `batch` × `accum` that
// stopped `position` samples into its epoch, for a run shaped like `now`: the smallest change that
// works, else the checkpoint's own shape.
std::string resume_fix(int64_t world, int64_t batch, int64_t accum, int64_t position, const StepShape& now,
                       const TrainConfig& config) {
  const int64_t samples = world * batch * accum;
  const bool global = config.train.global_batch_size > 0;
  // Whether a pipeline cutting `samples` with microbatches of at most `max_batch` resumes.
  auto pipeline_resumes = [&](int64_t max_batch) {
    try {
      auto share = share_pipeline_batch(samples, static_cast<int>(now.replicas), static_cast<int>(config.mesh.pipeline),
                                        config.mesh.microbatches, max_batch);
      return resumes(samples, position, {now.replicas, share.batch_size, share.grad_accum_steps, true});
    } catch (const UserError&) {
      return false;
    }
  };
  if (now.microbatched) {
    // The global batch, named, splits as Note [Global batch] says (it takes train.grad_accum_steps 1,
    // and a learning rate that is not scaled); else train.batch_size, the global batch being ranks ×
    // it × train.grad_accum_steps.
    if (config.optim.lr_scaling == "none" && pipeline_resumes(now.batch_size))
      return "use train.global_batch_size " + number(samples) +
             (now.given_accum_steps != 1 ? " and train.grad_accum_steps 1" : "") + " as written";
    const int64_t parts = now.replicas * config.mesh.pipeline * now.given_accum_steps;
    if (samples % parts == 0 && pipeline_resumes(samples / parts))
      return "use train.batch_size " + number(samples / parts) + " (" + number(parts / now.given_accum_steps) +
             " rank(s) × " + number(samples / parts) + " × train.grad_accum_steps " + number(now.given_accum_steps) +
             " = " + number(samples) + " samples a step, as written)";
    return "resume as written: train.global_batch_size " + number(samples) + " with dist.microbatches " +
           number(accum) + " over " + number(world) + " replica(s)";
  }
  if (global) {
    // The split depends on train.batch_size, the micro-batch's cap: named with the one this run has
    // now (Note [Global batch]), it splits as computed here.
    if (samples % now.replicas == 0) {
      auto share = share_global_batch(samples, static_cast<int>(now.replicas), now.batch_size);
      if (resumes(samples, position, {now.replicas, share.batch_size, share.grad_accum_steps, false}))
        return "use train.global_batch_size " + number(samples) + " and train.batch_size " + number(now.batch_size) +
               " as written";
    }
  } else {
    const int64_t parts = now.replicas * now.accum_steps;
    if (samples % parts == 0 && resumes(samples, position, {now.replicas, samples / parts, now.accum_steps, false}))
      return "use train.batch_size " + number(samples / parts) + " (" + number(now.replicas) + " rank(s) × " +
             number(samples / parts) + " × train.grad_accum_steps " + number(now.accum_steps) + " = " +
             number(samples) + " samples a step, as written)";
  }
  return "resume as written: " + number(world) + " rank(s) × train.batch_size " + number(batch) +
         " × train.grad_accum_steps " + number(accum) + (global ? ", without train.global_batch_size" : "");
}

}  // namespace

std::string run_identity_refusal(const RunIdentity& saved, const RunIdentity& now, const std::string& source) {
  if (!saved.config.empty()) {
    auto changes = training_changes(saved.config, now.config);
    if (!changes.empty())
      return source + " was written by a run of another config (" + describe_changes(changes) +
             "), which it does not fit; resume it with " + changed_keys(changes) + " as before" + kRestartHint;
  }
  // The same weights in another function would train on without a word where their shapes fit.
  if (!saved.model_code.empty() && !now.model_code.empty() && saved.model_code != now.model_code)
    return "model.path: the TorchScript module there is not the one " + source +
           " was trained with: its code differs (code fingerprint " + saved.model_code + " then, " + now.model_code +
           " now), and its weights would go on in another function; resume with the module as it was (saved again by "
           "another PyTorch version, the same code may read otherwise)" +
           kRestartHint;
  // Note [Data content lines]: a checkpoint from before content was recorded is compared on the rest.
  std::set<std::string> then = lines_of(saved.data), here = lines_of(now.data);
  auto says_content = [](const std::string& line) { return line.rfind(Task::kDataContentLine, 0) == 0; };
  if (std::none_of(then.begin(), then.end(), says_content)) std::erase_if(here, says_content);
  if (!saved.data.empty() && then != here) {
    return "data.path: the training data are not those " + source + " was trained on (then, not now: " +
           lines_missing(then, here) + "; now, not then: " + lines_missing(here, then) +
           "). The sampler's order over them would differ, repeating some samples and skipping others; restore "
           "the data as they were" + kRestartHint;
  }
  return "";
}

// Note [Resume at another world size]
// A checkpoint's position counts micro-batches of world_size × batch_size samples, and the
// sampler deals rank r the positions r, r + world, ... of one permutation (sampler.split: distributed),
// so micro-batch k is positions [k·W·B, (k+1)·W·B) at any world size W with the same W·B, and step s
// the positions [s·S, (s+1)·S) for S = W·B·A samples a step (A micro-steps). A run with the same S
// whose micro-batches of W·B fall on the checkpoint's position trains the same samples, averaged the
// same way, step for step, whatever W, B and A are (the weights and optimizer state are whole in the
// checkpoint, and any sharding takes its part of them); otherwise it would skip or repeat samples,
// or train steps of another size, and is refused.
void check_resume_layout(const TrainProgress& saved, const StepShape& now, const TrainConfig& config,
                         const std::string& source) {
  const bool other_world = saved.world_size != 0 && saved.world_size != now.replicas;
  if (other_world && config.sampler.split == "chunk")
    throw UserError("sampler.split: chunk gives each rank a fixed part of the data, so " + source + ", written by " +
                    number(saved.world_size) + " ranks, resumes only at that world size" + kRestartHint);
  // Checkpoints from before lr_ranks was recorded scaled by their replicas.
  const int64_t saved_rate_ranks = saved.lr_ranks > 0 ? saved.lr_ranks : saved.world_size;
  if (config.optim.lr_scaling != "none" && saved_rate_ranks != 0 && saved_rate_ranks != now.lr_ranks)
    throw UserError("optim.lr_scaling: " + config.optim.lr_scaling + " scales the learning rate by the ranks a step's " +
                    "batch counts (each pipeline stage, a dist.tensor group once), so " + source + ", written at " +
                    number(saved_rate_ranks) + ", would go on at another rate at " + number(now.lr_ranks) +
                    "; resume with as many" + kRestartHint);
  if (saved.batch_size == 0) {  // written before batch sizes were recorded: only its own world size is known to fit
    if (other_world)
      throw UserError("train.batch_size: " + source + " does not record its batch size, so it resumes only at its world size " +
                      number(saved.world_size) + kRestartHint);
    return;
  }
  const int64_t world = saved.world_size != 0 ? saved.world_size : now.replicas;
  const int64_t accum = saved.accum_steps != 0 ? saved.accum_steps : now.accum_steps;  // older: assumed kept
  const int64_t samples = world * saved.batch_size * accum;
  const int64_t position = saved.batch_in_epoch * world * saved.batch_size;  // samples into the epoch
  const std::string accum_key = now.microbatched ? "dist.microbatches" : "train.grad_accum_steps";
  if (samples != now.samples())
    throw UserError("train.batch_size: " + source + " was written by " + number(world) + " rank(s) × train.batch_size " +
                    number(saved.batch_size) + " × " + number(accum) + " micro-step(s) = " + number(samples) +
                    " samples a step; this run has " + number(now.replicas) +
                    (now.microbatched ? " replica(s) × microbatches of " : " × ") + number(now.batch_size) + " × " +
                    accum_key + " " + number(now.accum_steps) + " = " + number(now.samples()) +
                    ", which would train other steps; " + resume_fix(world, saved.batch_size, accum, position, now, config) +
                    kRestartHint);
  if (position % (now.replicas * now.batch_size) != 0)
    throw UserError("train.batch_size: " + source + " stopped " + number(position) + " samples into its epoch, not a whole " +
                    "number of this run's micro-batches of " + number(now.replicas) + " × " + number(now.batch_size) + "; " +
                    resume_fix(world, saved.batch_size, accum, position, now, config) + kRestartHint);
}

}  // namespace ddp
