#pragma once
// `train.task`: what kind of learning a run is. The task registry (task_registry.cpp) builds it and
// says what each kind trains on, so the config is checked against it before any data is read.

#include <string>
#include <vector>

#include "ddp/data/data_config.h"
#include "ddp/model/model_config.h"
#include "ddp/task/loss.h"

namespace ddp {

class ConfigSchema;

/// `train.task` (declared in the train section; the task owns it).
struct TaskConfig {
  std::string task = "classification";  ///< a registered task: classification | regression | node_classification | causal_lm
};

/// Declares `train.task`, bound to `config`, its choices the registered tasks.
void declare_config(ConfigSchema& schema, TaskConfig& config);

/// Declares the rules across sections that the task sets: data.dataset, model.name and train.loss
/// must be ones `task` trains with. Each names its key, the tasks the value trains with, and what
/// `task` takes instead.
void declare_task_rules(ConfigSchema& schema, const TaskConfig& task, const DataConfig& data, const ModelConfig& model,
                        const LossConfig& loss);

/// Every registered task, sorted (defined by the registry, so the config's choices follow it).
std::vector<std::string> task_names();

/// Models that a task builds itself rather than through the model registry (graphsage), sorted:
/// model.name takes them besides the registry's.
std::vector<std::string> task_built_models();

/// One key whose value the task does not train with: the key's path and the problem.
struct TaskMismatch {
  std::string key;      ///< data.dataset, model.name or train.loss
  std::string problem;  ///< e.g. "graph trains with train.task: node_classification, not classification"
};

/// What in the configs `task` does not train with; empty when all fits, or when `task`, the format
/// or the model is unknown (their own choices say so).
std::vector<TaskMismatch> task_mismatches(const TaskConfig& task, const DataConfig& data, const ModelConfig& model,
                                          const LossConfig& loss);

}  // namespace ddp
