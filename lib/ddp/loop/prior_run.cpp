#include "ddp/loop/prior_run.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "ddp/common/error.h"
#include "ddp/config/config_keys.h"
#include "ddp/record/metrics_reader.h"

namespace ddp {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The run's outputs, as the finished-run line points to them.
std::string outputs(const std::string& dir) {
  std::string listed;
  for (const char* name : {"model.pt", "report.html", "metrics.jsonl"})
    if (std::filesystem::exists(dir + "/" + name)) listed += (listed.empty() ? "" : ", ") + std::string(name);
  return listed.empty() ? dir : dir + " (" + listed + ")";
}

}  // namespace

std::vector<KeyChange> config_changes(const std::string& before_yaml, const std::string& after_yaml) {
  auto before = config_keys(before_yaml), after = config_keys(after_yaml);
  std::vector<KeyChange> changes;
  for (const auto& [key, value] : after) {
    auto it = before.find(key);
    if (it != before.end() && it->second != value) changes.push_back({key, it->second, value});
  }
  return changes;
}

std::vector<KeyChange> training_changes(const std::string& before_yaml, const std::string& after_yaml) {
  std::vector<KeyChange> changes = config_changes(before_yaml, after_yaml);
  std::erase_if(changes, [](const KeyChange& change) { return may_change_on_resume(change.key); });
  return changes;
}

std::vector<KeyChange> model_changes(const std::string& before_yaml, const std::string& after_yaml) {
  std::vector<KeyChange> changes = training_changes(before_yaml, after_yaml);
  std::erase_if(changes, [](const KeyChange& change) {
    return change.key.rfind("model.", 0) != 0 || change.key == "model.init_from";
  });
  return changes;
}

std::string describe_changes(const std::vector<KeyChange>& changes) {
  std::string text;
  for (const auto& change : changes)
    text += (text.empty() ? "" : ", ") + change.key + " " + change.before + " → " + change.after;
  return text;
}

std::string changed_keys(const std::vector<KeyChange>& changes) {
  std::string keys;
  for (const auto& change : changes) keys += (keys.empty() ? "" : ", ") + change.key;
  return keys;
}

bool may_change_on_resume(const std::string& key) {
  // Whole sections that steer a run without changing what it trains. dist: a resume at another
  // world size or shard setting is checked, or resharded, by the checkpoint itself.
  for (const char* section : {"run.", "dist.", "eval.", "checkpoint.", "logging.", "monitor."})
    if (key.rfind(section, 0) == 0) return true;
  // The batch keys: the checkpoint checks that each step keeps its samples (check_resume_layout).
  // model.channels_last: the same weights, laid out otherwise in memory; model.activation_checkpointing:
  // the same gradients, for less memory (a resume that ran out of it). schedule.decay_steps: how
  // a lengthened run's cosine goes on, as train.max_steps does without it. model.embedding_sharding:
  // where the tables' rows live, which the checkpoint reshards (Note [Sharded tables]).
  for (const char* steering : {"train.epochs", "train.max_steps", "train.log_every", "train.batch_size",
                               "train.grad_accum_steps", "train.global_batch_size", "data.cache_dir", "data.workers",
                               "data.prefetch", "model.channels_last", "model.activation_checkpointing",
                               "model.embedding_sharding", "schedule.decay_steps"})
    if (key == steering) return true;
  return false;
}

namespace {

// What DIR/metrics.jsonl says of the runs there: its last record's step and exit status (the run's
// end, when it finished), the furthest step any record reached (later runs append theirs), and the
// epoch of its last record that names one (begun, counted from 1: epochs only grow within a run).
struct RecordedRun {
  std::optional<double> exit_status, step;
  double trained_to = 0;
  double last_epoch = 0;
};

RecordedRun recorded_run(const std::string& dir) {
  RecordedRun recorded;
  if (!std::filesystem::exists(dir + "/metrics.jsonl")) return recorded;
  RunRecords run;
  try {
    run = read_run(dir);
  } catch (const UserError&) {  // no record in it (its one line cut short by a crash): it never finished
    return recorded;
  }
  if (!run.records.empty())
    for (const auto& [name, value] : run.records.back()) {
      if (name == "exit_status") recorded.exit_status = value;
      if (name == "step") recorded.step = value;
    }
  for (const auto& record : run.records)
    for (const auto& [name, value] : record) {
      if (name == "step") recorded.trained_to = std::max(recorded.trained_to, value);
      if (name == "epoch") recorded.last_epoch = value;
    }
  return recorded;
}

}  // namespace

std::optional<int64_t> finished_at_step(const std::string& dir) {
  const RecordedRun recorded = recorded_run(dir);
  if (!recorded.exit_status || *recorded.exit_status != 0 || !recorded.step) return std::nullopt;
  return static_cast<int64_t>(*recorded.step);
}

PriorRunVerdict judge_prior_run(const std::string& dir, const std::string& resolved_config, const std::string& new_run) {
  std::string config_path = dir + "/config.yaml";
  if (!std::filesystem::exists(config_path)) return {};
  const std::string before = read_text(config_path);
  auto changes = config_changes(before, resolved_config);
  std::vector<KeyChange> refused, steering;
  for (auto& change : changes) (may_change_on_resume(change.key) ? steering : refused).push_back(change);
  bool lengthened = false;
  for (const auto& change : steering)
    if (change.key == "train.epochs" || change.key == "train.max_steps") lengthened = true;

  // Finished: its last metrics record says it ended with exit status 0.
  const RecordedRun recorded = recorded_run(dir);
  const std::optional<double>& exit_status = recorded.exit_status;
  const std::optional<double>& step = recorded.step;
  const double trained_to = recorded.trained_to;
  std::error_code ec;
  const bool checkpointed = !std::filesystem::is_empty(dir + "/checkpoints", ec) && !ec;
  // A config.yaml with no keys (edited into something that is not YAML) compares as the same
  // config: the run there would be called finished, or trained over, for any config.
  if (config_keys(before).empty() && (step || checkpointed))
    return {PriorRunVerdict::Action::kRefuse,
            config_path + " is not a config that can be read (not YAML, or no map of sections), so whether this "
                          "config is the run's there cannot be told. Start a new run beside it with " + new_run +
                ", or remove " + dir + " to start this one there"};
  // A finished run's length changed: whether it now ends at or before its last step, where that can
  // be told without the data's size. Resumed from a checkpoint before that step, it would train
  // again to an earlier end and replace the finished run's model.pt with an earlier one.
  if (exit_status && *exit_status == 0 && refused.empty() && lengthened && step) {
    auto keys_before = config_keys(before), keys_now = config_keys(resolved_config);
    auto number = [](const std::map<std::string, std::string>& keys, const char* key) -> int64_t {
      auto it = keys.find(key);
      return it == keys.end() ? 0 : std::strtoll(it->second.c_str(), nullptr, 10);
    };
    const int64_t finished = static_cast<int64_t>(*step);
    const int64_t steps_then = number(keys_before, "train.max_steps"), steps_now = number(keys_now, "train.max_steps");
    const int64_t epochs_then = number(keys_before, "train.epochs"), epochs_now = number(keys_now, "train.epochs");
    const bool ended_by_epochs = steps_then == 0 || steps_then > finished;  // its epochs came first
    // Epochs are said as epochs: a step is not one at another world size or batch, an epoch is the data.
    std::string behind;
    if (steps_now > 0 && steps_now <= finished) {
      lengthened = false;
      if (steps_now < finished) behind = "train.max_steps " + std::to_string(steps_now) + " ends before step";
    } else if (ended_by_epochs && epochs_now <= epochs_then) {
      lengthened = false;  // its epochs end where they did, or before
      if (epochs_now < epochs_then)
        behind = "train.epochs " + std::to_string(epochs_now) + " ends before its " + std::to_string(epochs_then) +
                 " epochs, at step";
    }
    // Fewer epochs than the run had begun end before its last step, whatever train.max_steps says
    // (was: "already finished" where max_steps was its end, though the epochs now end earlier).
    const auto begun = static_cast<int64_t>(recorded.last_epoch);
    if (behind.empty() && epochs_now > 0 && epochs_now < begun) {
      lengthened = false;
      behind = "train.epochs " + std::to_string(epochs_now) + " ends before epoch " + std::to_string(begun) +
               ", which that run trained in, at step";
    }
    if (!behind.empty())
      return {PriorRunVerdict::Action::kRefuse,
              behind + " " + std::to_string(finished) + ", where run " + dir +
                  " finished: it has trained past it, and resuming an earlier checkpoint would replace its outputs "
                  "with an earlier model's. To train less, start a new run beside it with " +
                  new_run + "; to go on, lengthen it past step " + std::to_string(finished)};
  }
  if (exit_status && *exit_status == 0 && refused.empty() && !lengthened)
    return {PriorRunVerdict::Action::kFinished,
            "run " + dir + " already finished" + (step ? " at step " + std::to_string(static_cast<int64_t>(*step)) : "") +
                "; nothing to do. Its outputs: " + outputs(dir) + ". To train again: " + new_run + " for a new "
                "run beside it, or remove " + dir + " first"};

  if (!checkpointed) {
    // Nothing to resume: a fresh start, but an earlier run of another config that trained (its
    // records have steps) is not trained over silently (its model.pt replaced, its records followed
    // by another config's), and one of this config is said to start over. One that stopped before
    // training (a bad model.init_from, a model whose output does not fit: no record is past step
    // 0) left nothing to keep; one that failed so after a run that trained (which started afresh
    // over its records) leaves that run's model.pt, kept.
    std::error_code no_model;
    if (!step || (trained_to < 1 && !std::filesystem::exists(dir + "/model.pt", no_model))) return {};
    if (!refused.empty())
      return {PriorRunVerdict::Action::kRefuse,
              dir + " holds a run of another config (" + describe_changes(refused) + "), with no checkpoint. " +
                  "Start a new run beside it with " + new_run + ", or remove " + dir + " to start this one there"};
    return {PriorRunVerdict::Action::kStart,
            dir + " holds an earlier run of this config (to step " + std::to_string(static_cast<int64_t>(trained_to)) +
                ") with no checkpoint to resume from: this one starts afresh from step 0 over its outputs "
                "(checkpoint.every_steps keeps checkpoints)"};
  }
  if (!refused.empty()) {
    return {PriorRunVerdict::Action::kRefuse,
            dir + " holds a run of another config (" + describe_changes(refused) + "), which its checkpoints do not fit. " +
                "Start a new run beside it with " + new_run + ", or remove " + dir +
                " to start this one afresh; or resume it with " + changed_keys(refused) + " as before"};
  }
  return {PriorRunVerdict::Action::kResume, describe_changes(steering)};
}

}  // namespace ddp
