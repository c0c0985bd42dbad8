#include "ddp/task/task.h"

#include "ddp/task/supervised_task.h"

namespace ddp {

std::unique_ptr<Task> make_task(const DataConfig& data, const ModelConfig& model, const LossConfig& loss,
                                const TaskContext& context) {
  // Every model so far learns one output per sample; other kinds of task are chosen here as they arrive.
  return std::make_unique<SupervisedTask>(data, model, loss, context);
}

}  // namespace ddp
