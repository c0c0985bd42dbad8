#include "ddp/task/task.h"

#include "ddp/task/image_classification.h"

namespace ddp {

std::unique_ptr<Task> make_task(const DataConfig& data, const ModelConfig& model, const TaskContext& context) {
  // Every built-in model classifies images; other kinds of task are chosen here as they arrive.
  return std::make_unique<ImageClassification>(data, model, context);
}

}  // namespace ddp
