#pragma once
// Note [Re-running a run]: the same config run again finds its run directory from before. With
// checkpoint.resume auto it resumes from there, which is right after a crash or a preemption and
// wrong when the config has changed what is trained (a resumed model of another shape, or an
// optimizer of other settings, would be silent nonsense) or when the run had already finished (a
// no-op "run" would overwrite its report and metrics). So before anything is written, rank 0 reads
// what the directory holds and decides: go on (saying which keys that only steer the run changed),
// say that the run finished and do nothing, or refuse, naming the keys that differ and the ways out.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

/// One config key whose value differs between the run directory's config.yaml and this run's.
struct KeyChange {
  std::string key;  ///< section.key
  std::string before, after;
};

/// Every key whose value differs between two resolved configs (to_yaml's text); keys in one only
/// (another ddprun version's) are left out.
std::vector<KeyChange> config_changes(const std::string& before_yaml, const std::string& after_yaml);

/// Whether a key may change when a run resumes: it decides how long the run goes on, how often it
/// evaluates, logs and saves, or where and how it runs, not what is trained.
bool may_change_on_resume(const std::string& key);

/// The changes among config_changes(before, after) that decide what is trained (not may_change_on_resume).
std::vector<KeyChange> training_changes(const std::string& before_yaml, const std::string& after_yaml);

/// The changes among config_changes(before, after) to the model itself: model.* keys that change
/// what its weights mean (not model.init_from, where they came from, nor a may_change_on_resume
/// key such as model.channels_last). A tool that loads one run's weights into another config's
/// model (ddp-export, ddp-generate) refuses these.
std::vector<KeyChange> model_changes(const std::string& before_yaml, const std::string& after_yaml);

/// "optim.lr 0.1 → 0.5, model.hidden [64] → [32]".
std::string describe_changes(const std::vector<KeyChange>& changes);

/// "optim.lr, model.hidden".
std::string changed_keys(const std::vector<KeyChange>& changes);

/// The step at which the run in DIR finished, when its last metrics record says it ended with exit
/// status 0 (its model.pt is then that step's weights); nullopt otherwise.
std::optional<int64_t> finished_at_step(const std::string& dir);

/// What to do with a run directory, given this run's resolved config.
struct PriorRunVerdict {
  enum class Action { kStart, kResume, kFinished, kRefuse };
  Action action = Action::kStart;
  std::string message;  ///< kResume: the changed keys (may be empty); kFinished, kRefuse, kStart: the line to show
};

/// Reads DIR/config.yaml and DIR/metrics.jsonl (if any) and decides for a run whose checkpoints
/// are in DIR/checkpoints: kStart when there is no earlier config, kFinished when the last run
/// ended with exit status 0 and nothing that would lengthen it changed.
/// `new_run` is how this config names another run directory, for the advice ("--set run.name=NEW",
/// or with run.output_dir set "--set run.output_dir=NEW_DIR", since it outranks run.name).
PriorRunVerdict judge_prior_run(const std::string& dir, const std::string& resolved_config, const std::string& new_run);

}  // namespace ddp
