#include "ddp/loop/evaluator.h"

#include <algorithm>
#include <functional>

#include "ddp/comm/collectives.h"

namespace ddp {
namespace {

// Where evaluate_shard's sums keep, after the task's metric sums, the sample count and the ranks
// that stopped early.
struct EvalSums {
  int64_t samples, stopped;
  explicit EvalSums(const Task& task)
      : samples(static_cast<int64_t>(task.metric_names().size())), stopped(samples + 1) {}
};

// Metric sums, the sample count and the ranks that stopped early, summed over the ranks, as means.
EvalResult eval_result(const Task& task, torch::Tensor sums, int64_t planned) {
  sums = sums.to(torch::kCPU);
  auto names = task.metric_names();
  const EvalSums at(task);
  EvalResult result;
  result.samples = static_cast<int64_t>(sums[at.samples].item<double>());
  result.planned = planned;
  result.interrupted = sums[at.stopped].item<double>() > 0;
  if (result.samples == 0) return result;  // interrupted before its first batch: no means to give
  for (std::size_t i = 0; i < names.size(); ++i) result.metrics.emplace_back(names[i], sums[i].item<double>() / result.samples);
  task.add_derived_metrics(result.metrics);
  return result;
}

// Every rank's `mine` ([2, n], n differing by rank), concatenated in rank order, on rank 0 (the
// others return their own): one all-to-all in which every rank sends rank 0 its columns alone.
torch::Tensor gather_columns_to_rank_0(const Communicator& comm, const torch::Tensor& mine) {
  if (comm.world_size == 1) return mine;
  auto counts = torch::zeros({comm.world_size}, torch::kDouble);
  counts[comm.rank] = static_cast<double>(mine.size(1));
  counts = all_reduce_sum(comm, counts.to(mine.device())).to(torch::kCPU);
  std::vector<int64_t> send(static_cast<std::size_t>(comm.world_size), 0), receive(send);
  send[0] = mine.size(1);
  if (comm.rank == 0)
    for (int r = 0; r < comm.world_size; ++r) receive[static_cast<std::size_t>(r)] = static_cast<int64_t>(counts[r].item<double>());
  return all_to_all(comm, mine.t().contiguous(), send, receive).t();
}

// Note [Exact AUC]: the scores of every rank, ranked together on rank 0, which gives the others
// the area (every rank's metrics agree: a best-checkpoint choice reads them on each).
void add_auc(Task& task, const Communicator& everyone, EvalResult& result) {
  RankedScores* ranked = task.ranked_scores();
  if (!ranked) return;
  torch::Tensor all = gather_columns_to_rank_0(everyone, ranked->stacked(everyone.device));  // a collective
  ranked->clear();
  // [whether there is an area, the area], rank 0's for every rank.
  auto area = torch::zeros({2}, torch::TensorOptions(torch::kDouble).device(everyone.device));
  if (everyone.rank == 0 && result.samples > 0)
    if (auto auc = area_under_roc(all[0], all[1])) area.copy_(torch::tensor({1.0, *auc}, torch::kDouble));
  if (everyone.world_size > 1) broadcast_coalesced(everyone, {area});
  area = area.to(torch::kCPU);
  if (area[0].item<double>() > 0) result.metrics.emplace_back("auc", area[1].item<double>());
}

// The metrics of this rank's shard of `replicas`' eval samples, summed over `everyone`. `metrics`
// gives a batch's metric sums, or an undefined tensor where this rank has none to add (a pipeline
// stage before the last). With eval.max_batches the samples are that many batches' worth, spread
// evenly over the split (sample k·size/n for k < n), so that an ordered split (a text's windows)
// is still seen whole.
EvalResult evaluate_shard(Task& task, const EvalConfig& config, const Communicator& replicas,
                          const Communicator& everyone, const std::function<torch::Tensor(const Batch&)>& metrics,
                          const EvalHooks& hooks, bool may_stop, bool lockstep = false) {
  const int64_t size = task.size(Split::kEval);
  const int64_t planned = config.max_batches > 0 ? std::min(size, config.max_batches * config.batch_size) : size;
  auto [begin, end] = eval_shard(planned, replicas.world_size, replicas.rank);
  const int64_t batches = (end - begin + config.batch_size - 1) / config.batch_size;
  // Lockstep: rank 0's share is the largest (eval_shard gives the first ranks the remainder).
  auto [first_begin, first_end] = eval_shard(planned, replicas.world_size, 0);
  const int64_t forwards = lockstep ? (first_end - first_begin + config.batch_size - 1) / config.batch_size : batches;
  const auto count = static_cast<int64_t>(task.metric_names().size());
  auto& model = task.model();
  bool was_training = model.is_training();
  model.eval();
  // The metric sums, the sample count, then whether this rank stopped early, accumulated on the
  // device: no sync per batch.
  const EvalSums at(task);
  if (RankedScores* ranked = task.ranked_scores()) ranked->clear();  // an earlier evaluation's, cut short
  auto sums = torch::zeros({at.stopped + 1}, torch::dtype(torch::kDouble).device(everyone.device));
  {
    torch::NoGradGuard no_grad;
    int64_t done = 0;
    for (int64_t k = 0, start = begin; k < forwards; ++k, start += config.batch_size) {
      if (may_stop && hooks.stop_requested) {
        bool stop = hooks.stop_requested();
        // Lockstep: the ranks stop together, or one's next lookup would wait for a rank that left.
        if (lockstep) stop = all_reduce_sum(replicas, torch::full({1}, stop ? 1.0 : 0.0, torch::kDouble)).item<double>() > 0;
        if (stop) {
          sums[at.stopped].fill_(1.0);
          break;
        }
      }
      if (start >= end) {  // lockstep, past this rank's share: one sample's forward, uncounted, keeps the
        // others company (not an empty batch, which some forwards cannot reshape)
        const int64_t filler = begin < end ? begin * size / planned : 0;
        metrics(task.make_batch(Split::kEval, torch::full({1}, filler, torch::kLong)).to(everyone.device));
        if (RankedScores* ranked = task.ranked_scores()) ranked->drop_last();  // uncounted: unranked too
        continue;
      }
      auto positions = torch::arange(start, std::min(end, start + config.batch_size), torch::kLong);
      auto indices = planned == size ? positions : positions.mul(size).div(planned, "floor");
      Batch batch = task.make_batch(Split::kEval, indices).to(everyone.device);
      torch::Tensor batch_sums = metrics(batch);
      if (batch_sums.defined()) {
        sums.narrow(0, 0, count).add_(batch_sums);
        sums[at.samples].add_(static_cast<double>(batch.size()));
      }
      if (hooks.batch_done) hooks.batch_done(++done, batches);
    }
  }
  model.train(was_training);
  EvalResult result = eval_result(task, all_reduce_sum(everyone, sums), planned);
  add_auc(task, everyone, result);
  return result;
}

}  // namespace

EvalResult evaluate(Task& task, const EvalConfig& config, const Communicator& comm, const EvalHooks& hooks,
                    bool lockstep) {
  return evaluate_shard(
      task, config, comm, comm, [&task](const Batch& batch) { return task.metric_sums(batch); }, hooks,
      /*may_stop=*/true, lockstep);
}

EvalResult evaluate_pipelined(Task& task, const EvalConfig& config, PipelineRunner& stage, const Communicator& replicas,
                              const Communicator& world, const EvalHooks& hooks, bool counts_samples) {
  // Each stage runs every batch; only the last has metrics, and the others add zeros. A tensor
  // group's ranks all run the last stage's batch: only one of them counts it.
  return evaluate_shard(
      task, config, replicas, world,
      [&stage, counts_samples](const Batch& batch) {
        torch::Tensor sums = stage.evaluate(batch);  // on every rank: the tensor group computes it together
        return counts_samples ? sums : torch::Tensor();
      },
      hooks, /*may_stop=*/false);
}

}  // namespace ddp
