#include "ddp/loop/evaluator.h"

#include "ddp/comm/collectives.h"

namespace ddp {

namespace {
// Metric sums, then the sample count, summed over the ranks, as means.
EvalResult eval_result(const Task& task, torch::Tensor sums) {
  sums = sums.to(torch::kCPU);
  auto names = task.metric_names();
  EvalResult result;
  result.samples = static_cast<int64_t>(sums[-1].item<double>());
  for (std::size_t i = 0; i < names.size(); ++i)
    result.metrics.emplace_back(names[i], result.samples > 0 ? sums[i].item<double>() / result.samples : 0.0);
  if (result.samples > 0) task.add_derived_metrics(result.metrics);
  return result;
}
}  // namespace

EvalResult evaluate(Task& task, const EvalConfig& config, const Communicator& comm) {
  auto [begin, end] = eval_shard(task.size(Split::kEval), comm.world_size, comm.rank);
  auto names = task.metric_names();
  auto& model = task.model();
  bool was_training = model.is_training();
  model.eval();
  // The metric sums, then the sample count, accumulated on the device: no sync per batch.
  auto sums = torch::zeros({static_cast<int64_t>(names.size()) + 1}, torch::dtype(torch::kDouble).device(comm.device));
  {
    torch::NoGradGuard no_grad;
    for (int64_t start = begin; start < end; start += config.batch_size) {
      auto indices = torch::arange(start, std::min(end, start + config.batch_size), torch::kLong);
      Batch batch = task.make_batch(Split::kEval, indices).to(comm.device);
      sums.narrow(0, 0, static_cast<int64_t>(names.size())).add_(task.metric_sums(batch));
      sums[-1].add_(static_cast<double>(batch.size()));
    }
  }
  model.train(was_training);
  return eval_result(task, all_reduce_sum(comm, sums));
}

EvalResult evaluate_pipelined(Task& task, const EvalConfig& config, PipelineRunner& stage, const Communicator& replicas,
                              const Communicator& world) {
  auto [begin, end] = eval_shard(task.size(Split::kEval), replicas.world_size, replicas.rank);
  auto names = task.metric_names();
  auto& model = task.model();
  bool was_training = model.is_training();
  model.eval();
  // Only the last stage has metrics; the others add zeros.
  auto sums = torch::zeros({static_cast<int64_t>(names.size()) + 1}, torch::dtype(torch::kDouble).device(world.device));
  {
    torch::NoGradGuard no_grad;
    for (int64_t start = begin; start < end; start += config.batch_size) {
      auto indices = torch::arange(start, std::min(end, start + config.batch_size), torch::kLong);
      Batch batch = task.make_batch(Split::kEval, indices).to(world.device);
      torch::Tensor metrics = stage.evaluate(batch);
      if (!stage.last()) continue;
      sums.narrow(0, 0, static_cast<int64_t>(names.size())).add_(metrics);
      sums[-1].add_(static_cast<double>(batch.size()));
    }
  }
  model.train(was_training);
  return eval_result(task, all_reduce_sum(world, sums));
}


}  // namespace ddp
