#include "ddp/task/task_registry.h"

#include <algorithm>
#include <set>

#include "ddp/common/error.h"

namespace ddp {

// Each task's .cpp defines `void register_<file>_tasks(TaskRegistrations&)`, which may add several
// train.task values (supervised_task.cpp adds classification and regression), and the list below
// calls them (Note [Registries] in ddp/common/registry.h). Adding a kind of training is its .cpp plus
// one word in DDP_TASKS; train.task's choices, model.name's (for models a task builds itself) and
// the checks across keys follow from what the task registers.
#define DDP_TASKS(X) \
  X(causal_lm)       \
  X(graph)           \
  X(supervised)

#define DDP_DECLARE_REGISTER(name) void register_##name##_tasks(TaskRegistrations& tasks);
DDP_TASKS(DDP_DECLARE_REGISTER)
#undef DDP_DECLARE_REGISTER

namespace {

const TaskRegistrations& registrations() {
  static const TaskRegistrations all = [] {
    TaskRegistrations result("train.task", "task");
#define DDP_CALL_REGISTER(name) register_##name##_tasks(result);
    DDP_TASKS(DDP_CALL_REGISTER)
#undef DDP_CALL_REGISTER
    return result;
  }();
  return all;
}

bool contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

// "a", "a or b", "a, b or c".
std::string either(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return out;
}

// The data.dataset values of `kind`.
std::vector<std::string> formats_of(DatasetKind kind) {
  std::vector<std::string> names;
  for (const auto& name : dataset_format_names())
    if (find_dataset_format(name).kind == kind) names.push_back(name);
  return names;
}

// Adds "KEY: VALUE trains with train.task: A or B, not TASK (train.task TASK takes KEY: x or y)" to
// `found` when `chosen` does not take the value; a value no task takes is left to the key's choices.
void check(std::vector<TaskMismatch>& found, const std::string& key, const std::string& value,
           const std::string& task, const std::function<bool(const TaskRegistration&)>& takes,
           const std::vector<std::string>& instead) {
  const TaskRegistration& chosen = registrations().at(task);
  if (takes(chosen)) return;
  std::vector<std::string> tasks;
  for (const auto& [name, registration] : registrations())
    if (takes(registration)) tasks.push_back(name);
  if (tasks.empty()) return;
  found.push_back({key, value + " trains with train.task: " + either(tasks) + ", not " + task + " (train.task " + task +
                            " takes " + key + ": " + either(instead) + ")"});
}

}  // namespace

std::vector<std::string> task_names() {
  return registrations().names();
}

std::vector<std::string> task_built_models() {
  std::set<std::string> names;
  for (const auto& [name, registration] : registrations())
    names.insert(registration.models.begin(), registration.models.end());
  for (const auto& name : model_names()) names.erase(name);  // a task may list registry models it takes too
  return {names.begin(), names.end()};
}

std::vector<TaskMismatch> task_mismatches(const TaskConfig& task, const DataConfig& data, const ModelConfig& model,
                                          const LossConfig& loss) {
  std::vector<TaskMismatch> found;
  const TaskRegistration* entry = registrations().find(task.task);
  if (!entry) return found;  // train.task's choices say so
  const TaskRegistration& chosen = *entry;
  if (contains(dataset_format_names(), data.dataset)) {
    DatasetKind kind = find_dataset_format(data.dataset).kind;
    check(found, "data.dataset", data.dataset, task.task, [kind](const TaskRegistration& r) { return r.data == kind; },
          formats_of(chosen.data));
  }
  check(found, "model.name", model.name, task.task,
        [&model](const TaskRegistration& r) { return contains(r.models, model.name); }, chosen.models);
  check(found, "train.loss", loss.loss, task.task,
        [&loss](const TaskRegistration& r) { return contains(r.losses, loss.loss); }, chosen.losses);
  return found;
}

std::unique_ptr<Task> make_task(const TaskConfig& task, const DataConfig& data, const SamplerConfig& sampler,
                                const ModelConfig& model, const LossConfig& loss, const TaskContext& context) {
  const TaskRegistration& chosen = registrations().at(task.task);
  std::string problems;
  for (const auto& mismatch : task_mismatches(task, data, model, loss))
    problems += (problems.empty() ? "" : "\n") + mismatch.key + ": " + mismatch.problem;
  if (!problems.empty()) throw ConfigError(problems);
  return chosen.make(data, sampler, model, loss, context);
}

}  // namespace ddp
