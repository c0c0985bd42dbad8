#include "ddp/loop/global_batch.h"

#include <algorithm>

#include <fmt/format.h>

#include "ddp/common/error.h"
#include "ddp/loop/train_config.h"

namespace ddp {
namespace {

// The divisors of n up to `limit`, each times `unit`: "1, 2, 4".
std::string divisors_up_to(int64_t n, int64_t limit, int64_t unit = 1) {
  std::string fits;
  for (int64_t d = 1; d <= n && d <= limit; ++d)
    if (n % d == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(d * unit);
  return fits;
}

}  // namespace

// Note [Global batch]: one rule, whatever the layout: a step trains train.global_batch_size G
// samples when it is set, else world size W × train.batch_size × train.grad_accum_steps (what W
// ranks of plain data parallelism train), so that sharding, pipeline stages or their mix never
// change what a step trains. Under data parallelism each rank takes G/W samples, as `accum` equal
// micro-batches of B (B × accum = G/W, B ≤ train.batch_size). A pipeline's W ranks form W/P
// replicas of P stages; each replica takes G/(W/P) samples, cut into dist.microbatches that flow
// through its stages (its P ranks train the samples that P data-parallel ranks would).
// The sampler deals replica r the positions r, r + R, ... of one permutation, so the micro-batches of
// one step cover the positions [s·G, (s+1)·G) at every layout: each optimizer step averages the same
// samples whatever W is, and a run that resumes at another world size (an elastic round, Note
// [Resume at another world size]) goes on as if nothing had changed. The learning rate is the one
// given: it belongs to the global batch, which does not change (optim.lr_scaling must be none).
GlobalBatchShare share_global_batch(int64_t global_batch, int world, int64_t max_batch, int tensor) {
  if ((world <= 0 || global_batch % world != 0) && tensor > 1)  // the world sizes that fit count whole groups
    throw UserError(fmt::format("train.global_batch_size: {} samples do not split evenly over {} tensor groups of {} "
                                "ranks (dist.tensor); this run needs a world size that is {} × a number that divides "
                                "it ({}), or a global batch that {} divides",
                                global_batch, world, tensor, tensor, divisors_up_to(global_batch, 64, tensor), world));
  if (world <= 0 || global_batch % world != 0)
    throw UserError(fmt::format("train.global_batch_size: {} samples do not split evenly over {} ranks; this run needs "
                                "a world size that divides it ({}), or a global batch that {} divides",
                                global_batch, world, divisors_up_to(global_batch, 64), world));
  const int64_t share = global_batch / world;
  for (int64_t accum = (share + max_batch - 1) / max_batch; accum <= share; ++accum)
    if (share % accum == 0)
      return {share / accum, accum,
              fmt::format("global batch {} = {} rank(s) × batch {} × {} micro-step(s) a step", global_batch, world,
                          share / accum, accum)};
  return {1, share, ""};  // not reached: accum == share divides it
}

GlobalBatchShare share_pipeline_batch(int64_t global_batch, int replicas, int stages, int64_t microbatches,
                                      int64_t max_batch, const std::string& key) {
  if (replicas <= 0 || global_batch % replicas != 0)
    throw UserError(fmt::format("{}: {} samples do not split evenly over {} pipeline replica(s); use a global batch "
                                "that {} divides",
                                key, global_batch, replicas, replicas));
  const int64_t share = global_batch / replicas;
  int64_t count = microbatches;
  if (count == 0) {
    // Enough microbatches to keep the stages busy (2P fills a 1F1B pipeline), and more where the
    // share (grown by train.grad_accum_steps) would make them larger than train.batch_size.
    count = share % (2 * stages) == 0 || share % stages != 0 ? 2 * stages : stages;
    // Where neither 2P nor P divides the share (40 over 3 stages), the fewest that do, from P on
    // (was: refused, blaming dist.microbatches, which was not set); a share below P, one each.
    if (share % count != 0) count = std::min<int64_t>(stages, share);
    while (share / count > std::max<int64_t>(max_batch, 1) || share % count != 0) ++count;
  }
  if (share % count != 0)
    throw UserError(fmt::format("{}: {} samples do not split into {} replica(s) × {} microbatches (dist.microbatches); "
                                "use a dist.microbatches that divides each replica's {} ({}){}",
                                key, global_batch, replicas, count, share, divisors_up_to(share, 2000),
                                key == "train.global_batch_size"
                                    ? fmt::format(", or a global batch that is a multiple of {}", replicas * count)
                                    : ""));
  // dist.microbatches given may make them larger than train.batch_size: as asked, but said.
  const std::string larger =
      microbatches > 0 && share / count > max_batch
          ? fmt::format(" (above train.batch_size {}, as dist.microbatches {} asks)", max_batch, microbatches)
          : "";
  return {share / count, count,
          fmt::format("global batch {} = {} replica(s) of {} pipeline stages × {} microbatches of {}{} a step",
                      global_batch, replicas, stages, count, share / count, larger),
          true};
}

int batch_ranks(const TrainConfig& config, int world) {
  return world / static_cast<int>(config.mesh.tensor);  // a tensor group trains one replica's batch (Note [Tensor parallelism])
}

GlobalBatchShare share_step(const TrainConfig& config, int world) {
  world = batch_ranks(config, world);
  const auto& train = config.train;
  const int stages = static_cast<int>(config.mesh.pipeline);
  const bool given = train.global_batch_size > 0;
  const int64_t global_batch = given ? train.global_batch_size : world * train.batch_size * train.grad_accum_steps;
  GlobalBatchShare share;
  if (stages > 1) {
    share = share_pipeline_batch(global_batch, world / stages, stages, config.mesh.microbatches, train.batch_size,
                                 given ? "train.global_batch_size" : "dist.microbatches");
  } else if (given) {
    share = share_global_batch(global_batch, world, train.batch_size, static_cast<int>(config.mesh.tensor));
  } else {
    share = {train.batch_size, train.grad_accum_steps,
             fmt::format("global batch {} = {} rank(s) × batch {} × {} micro-step(s) a step", global_batch, world,
                         train.batch_size, train.grad_accum_steps)};
  }
  if (config.mesh.tensor > 1) share.formation += fmt::format(", each rank a tensor group of {} ranks", config.mesh.tensor);
  share.formation += given ? " (train.global_batch_size)" : " (world size × train.batch_size × train.grad_accum_steps)";
  return share;
}

}  // namespace ddp
