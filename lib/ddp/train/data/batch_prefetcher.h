#pragma once
// Batches gathered and normalised ahead of the step by background threads, handed out in order.

#include <torch/torch.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp/train/data/batch.h"
#include "ddp/train/data/dataset.h"

namespace ddp {

/// How batches are assembled.
struct PrefetchOptions {
  double mean = 0;
  double std = 1;
  int64_t workers = 1;  ///< threads
  int64_t depth = 2;    ///< batches ready or in progress ahead of the consumer
  bool pin_memory = false;  ///< page-locked, for non-blocking copies to a GPU
};

/// Produces the batches of one epoch's index order, `workers` threads at a time, at most `depth` ahead.
class BatchPrefetcher {
 public:
  /// Starts the threads; `data` must outlive the prefetcher.
  BatchPrefetcher(const Dataset& data, const PrefetchOptions& options);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  /// Starts an epoch: batch b is indices[b·batch_size, (b+1)·batch_size), from `first_batch` on.
  /// Drops whatever the previous epoch had prepared.
  void start(torch::Tensor indices, int64_t batch_size, int64_t first_batch);

  /// The next batch in order; waits if it is not ready yet.
  Batch next();

 private:
  void work();

  const Dataset& data_;
  PrefetchOptions options_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  int64_t generation_ = 0;  // bumps on start(); work of an older epoch is discarded
  torch::Tensor indices_;
  int64_t batch_size_ = 1;
  int64_t batches_ = 0;
  int64_t next_to_make_ = 0;
  int64_t next_to_hand_out_ = 0;
  std::map<int64_t, Batch> ready_;
  std::exception_ptr error_;  // a failed batch, rethrown by next()
  std::vector<std::thread> threads_;
};

}  // namespace ddp
