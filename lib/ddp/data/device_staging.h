#pragma once
// Note [Staged batches]: on a GPU, a batch is copied to the device by the prefetcher's thread as
// soon as it is assembled, on a copy stream of that thread's, up to data.prefetch batches ahead of
// the step. The copy then overlaps the step before it instead of queueing behind that step's
// kernels on the step's stream. Handing the batch over, the step's stream waits for the copy's
// event, and the caching allocator is told that the step's stream uses the memory (record_stream),
// so it is not given out again while the step still reads it. The pinned host memory the copy reads
// is safe too: the host allocator holds it until the copy's own event has passed.

#include <torch/types.h>

#include <memory>

#include "ddp/data/batch.h"

namespace ddp {

/// A batch whose copy to its device may still be running, and the means to wait for it.
struct StagedBatch {
  Batch batch;
  std::shared_ptr<void> copy_done;  ///< the copy's event; null where there is nothing to wait for
};

/// Copies batches to `device` ahead of their step (Note [Staged batches]); on the CPU, batches
/// pass as they are.
class DeviceStaging {
 public:
  explicit DeviceStaging(const torch::Device& device) : device_(device) {}

  /// On an assembling thread: `batch` (pinned) copied to the device on this thread's copy stream.
  StagedBatch stage(Batch batch) const;
  /// On the step's thread, before the step: the batch, its copy ordered before the step's work.
  Batch hand_over(StagedBatch staged) const;

  const torch::Device& device() const { return device_; }

 private:
  torch::Device device_;
};

}  // namespace ddp
