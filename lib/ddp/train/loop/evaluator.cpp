#include "ddp/train/loop/evaluator.h"

#include "ddp/train/data/batch.h"
#include "ddp/train/dist/collectives.h"

namespace ddp {

EvalResult evaluate(Model& model, const Dataset& data, double mean, double std, int64_t batch_size, const Communicator& comm) {
  auto [begin, end] = eval_shard(data.size(), comm.world_size, comm.rank);
  bool was_training = model.is_training();
  model.eval();
  double loss_sum = 0, correct = 0;
  {
    torch::NoGradGuard no_grad;
    for (int64_t start = begin; start < end; start += batch_size) {
      auto indices = torch::arange(start, std::min(end, start + batch_size), torch::kLong);
      Batch batch = gather_batch(data, indices, mean, std);
      batch.inputs = batch.inputs.to(comm.device, /*non_blocking=*/true);
      batch.targets = batch.targets.to(comm.device, /*non_blocking=*/true);
      auto logits = model.forward(batch.inputs);
      loss_sum += torch::nn::functional::cross_entropy(
                      logits, batch.targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .item<double>();
      correct += logits.argmax(1).eq(batch.targets).sum().item<double>();
    }
  }
  model.train(was_training);
  auto sums = all_reduce_sum(comm, torch::tensor({loss_sum, correct, static_cast<double>(end - begin)},
                                                        torch::kDouble));
  EvalResult result;
  result.samples = static_cast<int64_t>(sums[2].item<double>());
  if (result.samples > 0) {
    result.loss = sums[0].item<double>() / result.samples;
    result.accuracy = sums[1].item<double>() / result.samples;
  }
  return result;
}

}  // namespace ddp
