#include "ddp/task/task.h"

#include "ddp/common/error.h"

#include "ddp/task/graph_task.h"
#include "ddp/task/supervised_task.h"

namespace ddp {

std::unique_ptr<Task> make_task(const DataConfig& data, const SamplerConfig& sampler, const ModelConfig& model,
                                const LossConfig& loss, const TaskContext& context) {
  if (model.name == "graphsage") return std::make_unique<GraphTask>(data, sampler, model, loss, context);
  if (data.dataset == "graph")
    throw ConfigError("data.dataset: a graph trains with model.name: graphsage, not " + model.name);
  return std::make_unique<SupervisedTask>(data, model, loss, context);
}

}  // namespace ddp
