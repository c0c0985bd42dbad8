#include "ddp/loop/plain_step.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "ddp/comm/collectives.h"
#include "ddp/loop/autocast_scope.h"
#include "ddp/loop/memory_in_use.h"

namespace ddp {

StepWork PlainStep::train(int64_t micro_batches, const StepHooks& hooks) {
  collectives_.step_begins();
  StepWork work;
  for (int64_t m = 0; m < micro_batches; ++m) {
    // Only the last micro-step's backward communicates (the buckets start during it).
    if (m + 1 == micro_batches) hooks.before_last_backward();
    Batch batch = hooks.next_batch();
    torch::Tensor loss;
    const int64_t before = memory_in_use(replicas_.device);
    {
      AutocastScope autocast(replicas_.device, mixed_precision_);
      loss = task_.loss(batch);
    }
    peak_activation_bytes_ = std::max(peak_activation_bytes_, memory_in_use(replicas_.device) - before);
    // Note [Micro-batches of unequal size].
    const double parts = hooks.step_samples > 0 && batch.size() > 0
                             ? static_cast<double>(hooks.step_samples) / static_cast<double>(batch.size())
                             : static_cast<double>(micro_batches);
    (loss / parts).backward();
    // Its samples' losses summed: the logged loss is the mean over the step's samples, as the
    // gradients are, however its micro-batches split them.
    auto loss_double = loss.detach().to(torch::kDouble) * static_cast<double>(batch.size());
    work.loss_sum = m == 0 ? loss_double : work.loss_sum + loss_double;
    work.stats.batches += 1;
    work.stats.samples += batch.size();
    work.stats.sampled_edges += batch.sampled_edges;
    work.stats.tokens += batch.tokens;
  }
  if (!counts_samples_) return {};  // a tensor group's rank 0 speaks for it
  return work;
}

MetricsRecord PlainStep::report() {
  auto per_rank = torch::zeros({world_.world_size}, torch::kDouble);
  per_rank[world_.rank] = static_cast<double>(peak_activation_bytes_);
  if (world_.world_size > 1) per_rank = all_reduce_sum(world_, per_rank);
  const double mib = per_rank.max().item<double>() / (1024.0 * 1024.0);
  if (world_.rank != 0) return {};
  spdlog::info("peak activation memory per rank: {:.2f} MiB (what a forward held for its backward)", mib);
  MetricsRecord record{{"activation_mib_max", mib}};
  collectives_.report(true, record);
  return record;
}

EvalResult PlainStep::evaluate(const EvalConfig& config, const EvalHooks& hooks) {
  AutocastScope autocast(replicas_.device, mixed_precision_);
  return ddp::evaluate(task_, config, replicas_, hooks, lockstep_);
}

}  // namespace ddp
