#include "ddp/task/supervised_task.h"

#include <spdlog/fmt/fmt.h>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/checksum64.h"
#include "ddp/data/dataset_splits.h"
#include "ddp/model/python_state_dict.h"
#include "ddp/task/task_registry.h"

namespace ddp {

SupervisedTask::SupervisedTask(const DataConfig& data, const ModelConfig& model, const LossConfig& loss,
                               const TaskContext& context)
    : loss_(loss) {
  DatasetSplits splits = load_dataset_splits(data, model.num_classes);
  train_ = std::move(splits.train);
  eval_ = std::move(splits.eval);
  train_.labels = loss_.prepare_targets(train_.labels, train_.source, train_.source_rows);
  if (eval_) eval_->labels = loss_.prepare_targets(eval_->labels, eval_->source, eval_->source_rows);
  model_ = make_model(model, context.model);
  max_class_ = check(train_, model, "data.path");
  max_class_source_ = train_.source;
  if (eval_) {
    // An idx directory holds its test split; the file formats have theirs in eval_path, or carved.
    const std::string eval_key = data.dataset == "idx"           ? "data.path"
                                 : !data.eval_path.empty()        ? "data.eval_path"
                                 : data.eval_fraction > 0         ? "data.eval_fraction"
                                                                  : "data.eval_split";
    const int64_t eval_max = check(*eval_, model, eval_key);
    if (eval_max > max_class_) max_class_ = eval_max, max_class_source_ = eval_->source;
  }
  normalizer_ = make_normalizer(data, train_);
  if (model_->takes_stored_features() && !normalizer_.as_stored)
    throw ConfigError("model.name " + model.name + " takes its features as stored (32-bit hashes that float32 would "
                      "round), which data.dataset criteo gives; data.dataset " + data.dataset + " is normalised to float32");
  model_->to(context.device);
}

// At load, so that a bad eval split fails before training rather than after the first epoch.
// Returns the largest class label (0 for float targets).
int64_t SupervisedTask::check(const Dataset& set, const ModelConfig& model, const std::string& key) const {
  if (set.size() == 0) throw FileError(set.source + " holds no samples (" + key + ")");
  std::vector<int64_t> wanted = model_->input_shape();
  if (!wanted.empty() && set.sample_shape() != wanted)
    throw FileError(set.source + " holds samples of shape " + format_shape(set.sample_shape()) + "; model.name " +
                    model.name + " takes " + format_shape(wanted) + " (model.name: torchscript trains any shape)");
  if (set.labels.scalar_type() != torch::kLong) return 0;
  int64_t min_label = set.labels.min().item<int64_t>();
  int64_t max_label = set.labels.max().item<int64_t>();
  if (min_label < 0) throw FileError(set.source + " holds a negative label (" + std::to_string(min_label) + ")");
  if (!wanted.empty() && max_label >= model.num_classes)
    throw ConfigError("model.num_classes: " + std::to_string(model.num_classes) + " is too few for " + set.source +
                      ", whose labels go up to " + std::to_string(max_label));
  return max_label;
}

std::string SupervisedTask::data_content() const {
  // The stored features and labels of 64 samples spread over the training split (all of a smaller one).
  const int64_t n = train_.size(), taken = std::min<int64_t>(n, 64);
  auto rows = torch::linspace(0, static_cast<double>(n - 1), taken, torch::kDouble).round().to(torch::kLong);
  Checksum64 sum;
  for (const torch::Tensor& values : {train_.select(rows).contiguous(), train_.labels.index_select(0, rows).contiguous()})
    sum.update(values.data_ptr(), static_cast<std::size_t>(values.numel()) * values.element_size());
  return fmt::format("{:016x}", sum.digest());
}

int64_t SupervisedTask::size(Split split) const {
  if (split == Split::kTrain) return train_.size();
  return eval_ ? eval_->size() : 0;
}

Batch SupervisedTask::make_batch(Split split, const torch::Tensor& indices) const {
  return gather_batch(split == Split::kTrain ? train_ : *eval_, indices, normalizer_);
}

const torch::Tensor& SupervisedTask::checked(const torch::Tensor& output, const Batch& batch) {
  if (!output_checked_) {
    loss_.check_output(output, batch.targets, max_class_, max_class_source_);
    output_checked_ = true;
  }
  return output;
}

torch::Tensor SupervisedTask::forward(const Batch& batch) { return checked(model_->forward(batch.inputs[0]), batch); }

torch::Tensor SupervisedTask::loss(const Batch& batch) { return loss_.mean(forward(batch), batch.targets); }

torch::Tensor SupervisedTask::metric_sums(const Batch& batch) { return loss_.metric_sums(forward(batch), batch.targets); }

torch::Tensor SupervisedTask::output_loss(const torch::Tensor& output, const Batch& batch) {
  return loss_.mean(checked(output, batch), batch.targets);
}

torch::Tensor SupervisedTask::output_metric_sums(const torch::Tensor& output, const Batch& batch) {
  return loss_.metric_sums(checked(output, batch), batch.targets);
}

void SupervisedTask::save_model(const std::string& output_dir) const {
  ddp::save_model(*model_, output_dir);
  // The model takes features as data.normalize made them: whoever feeds it raw ones needs the numbers.
  write_file_atomically(output_dir + "/normalization.json", normalization_json(normalizer_));
}

// One class, two train.task values: the loss they take tells its outputs apart.
void register_supervised_tasks(TaskRegistrations& tasks) {
  TaskFactory make = [](const DataConfig& data, const SamplerConfig&, const ModelConfig& model, const LossConfig& loss,
                        const TaskContext& context) -> std::unique_ptr<Task> {
    return std::make_unique<SupervisedTask>(data, model, loss, context);
  };
  const std::vector<std::string> models{"convnet", "dlrm", "linear3", "mlp", "torchscript"};
  tasks.add("classification", {DatasetKind::kSamples, {"cross_entropy", "bce_with_logits"}, models, make});
  tasks.add("regression", {DatasetKind::kSamples, {"mse"}, models, make});
}

}  // namespace ddp
