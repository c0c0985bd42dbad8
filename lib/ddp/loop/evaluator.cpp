#include "ddp/loop/evaluator.h"

#include "ddp/comm/collectives.h"

namespace ddp {

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
  sums = all_reduce_sum(comm, sums).to(torch::kCPU);
  EvalResult result;
  result.samples = static_cast<int64_t>(sums[-1].item<double>());
  for (std::size_t i = 0; i < names.size(); ++i)
    result.metrics.emplace_back(names[i], result.samples > 0 ? sums[i].item<double>() / result.samples : 0.0);
  if (result.samples > 0) task.add_derived_metrics(result.metrics);
  return result;
}

}  // namespace ddp
