#include "ddp/task/task_config.h"

#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, TaskConfig& config) {
  schema.add("train.task", &config.task,
             "what is learnt: classification (train.loss cross_entropy or bce_with_logits, a model from the "
             "registry), regression (train.loss mse), node_classification (data.dataset graph, model.name graphsage, "
             "train.loss cross_entropy), causal_lm (data.dataset tokens, model.name gpt, llama or torchscript, next-token "
             "cross_entropy)")
      .choices(task_names());
}

void declare_task_rules(ConfigSchema& schema, const TaskConfig& task, const DataConfig& data, const ModelConfig& model,
                        const LossConfig& loss) {
  for (const char* key : {"data.dataset", "model.name", "train.loss"})
    schema.rule(key, [key, &task, &data, &model, &loss]() -> std::string {
      for (const auto& mismatch : task_mismatches(task, data, model, loss))
        if (mismatch.key == key) return mismatch.problem;
      return "";
    });
}

}  // namespace ddp
