#pragma once
// Batches made ahead of the step by background threads, handed out in order, on the step's device
// (Note [Staged batches]).

#include <torch/torch.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp/data/batch.h"
#include "ddp/data/data_config.h"
#include "ddp/data/device_staging.h"

namespace ddp {

/// Produces the batches of one epoch's index order, data.workers threads at a time, at most
/// data.prefetch ahead of the consumer.
class BatchPrefetcher {
 public:
  /// Starts the threads; whatever `make` reads must outlive the prefetcher. Batches are handed out
  /// on `device`: for a GPU, the threads pin each and start its copy there.
  BatchPrefetcher(BatchMaker make, const DataConfig& config, const torch::Device& device);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  /// Starts an epoch: batch b is indices[b·batch_size, (b+1)·batch_size), from `first_batch` on.
  /// Drops whatever the previous epoch had prepared.
  void start(torch::Tensor indices, int64_t batch_size, int64_t first_batch);

  /// The next batch in order, on the device; waits if it is not ready yet (a copy to a GPU is
  /// waited for by the step's stream, not here).
  Batch next();

  /// The time next() has spent so far, in ms: how long training waited for data.
  double waited_ms() const { return waited_ms_; }

 private:
  void work();

  BatchMaker make_;
  int64_t depth_;
  DeviceStaging staging_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  int64_t generation_ = 0;  // bumps on start(); work of an older epoch is discarded
  torch::Tensor indices_;
  int64_t batch_size_ = 1;
  int64_t batches_ = 0;
  int64_t next_to_make_ = 0;
  int64_t next_to_hand_out_ = 0;
  std::map<int64_t, StagedBatch> ready_;
  std::exception_ptr error_;  // a failed batch, rethrown by next()
  double waited_ms_ = 0;      // by next(), on the caller's thread
  std::vector<std::thread> threads_;
};

}  // namespace ddp
