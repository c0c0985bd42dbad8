#include "ddp/loop/global_batch.h"

#include "ddp/common/error.h"

namespace ddp {

// Note [Global batch]: with train.global_batch_size G set, a world of W ranks takes G/W samples per
// rank and optimizer step, as `accum` equal micro-batches of B (B × accum = G/W, B ≤ train.batch_size).
// The sampler deals rank r the positions r, r + W, ... of one permutation, so the micro-batches of
// one step cover the positions [s·G, (s+1)·G) at every W: each optimizer step averages the same
// samples whatever W is, and a run that resumes at another world size (an elastic round, Note
// [Resume at another world size]) goes on as if nothing had changed. The learning rate is the one
// given: it belongs to the global batch, which does not change (optim.lr_scaling must be none).
GlobalBatchShare share_global_batch(int64_t global_batch, int world, int64_t max_batch) {
  if (world <= 0 || global_batch % world != 0) {
    std::string fits;
    for (int w = 1; w <= global_batch && w <= 64; ++w)
      if (global_batch % w == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(w);
    throw UserError("train.global_batch_size: " + std::to_string(global_batch) + " samples do not split evenly over " +
                    std::to_string(world) + " ranks; this run needs a world size that divides it (" + fits +
                    "), or a global batch that " + std::to_string(world) + " divides");
  }
  const int64_t share = global_batch / world;
  for (int64_t accum = (share + max_batch - 1) / max_batch; accum <= share; ++accum)
    if (share % accum == 0) return {share / accum, accum};
  return {1, share};  // not reached: accum == share divides it
}

GlobalBatchShare share_fixed_microbatches(int64_t global_batch, int replicas, int64_t microbatches, int64_t batch,
                                          int64_t accum) {
  if (global_batch > 0) {
    const int64_t parts = replicas * microbatches;
    if (global_batch % parts != 0)
      throw UserError("train.global_batch_size: " + std::to_string(global_batch) + " samples do not split into " +
                      std::to_string(replicas) + " replica(s) × " + std::to_string(microbatches) +
                      " microbatches (dist.microbatches); use a multiple of " + std::to_string(parts));
    return {global_batch / parts, microbatches};
  }
  if (accum != 1)
    throw ConfigError("train.grad_accum_steps: with dist.pipeline the microbatches are the accumulation; set "
                      "dist.microbatches instead (now " + std::to_string(microbatches) + ")");
  return {batch, microbatches};
}

}  // namespace ddp
