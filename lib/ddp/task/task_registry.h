#pragma once
// Tasks chosen by `train.task`. Each task's .cpp registers a factory and says what it trains on;
// see Note [Registries] in ddp/common/registry.h. make_task (task.h) is the dispatcher.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/common/registry.h"
#include "ddp/data/dataset_format.h"
#include "ddp/task/task.h"

namespace ddp {

/// Builds a task from its configs (the train.task it was registered under is known).
using TaskFactory = std::function<std::unique_ptr<Task>(const DataConfig& data, const SamplerConfig& sampler,
                                                        const ModelConfig& model, const LossConfig& loss,
                                                        const TaskContext& context)>;

/// One `train.task` value: what it trains on and with, checked before the factory runs.
struct TaskRegistration {
  DatasetKind data = DatasetKind::kSamples;  ///< the kind of data.dataset it reads
  std::vector<std::string> losses;           ///< the train.loss values it takes
  std::vector<std::string> models;  ///< the model.name values it takes (built itself or from the registry)
  TaskFactory make;
};

/// Name → registration; each task's register function adds itself here.
using TaskRegistrations = Registry<TaskRegistration>;

}  // namespace ddp
