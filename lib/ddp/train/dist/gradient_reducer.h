#pragma once
// Gradient sync: flashlight's Reducer idea (add / finalize) over c10d, with DDP's bucketing.

#include <torch/torch.h>

#include <vector>

#include "ddp/train/dist/process_group.h"

namespace ddp {

/// Bucket sizes, in MiB.
struct ReducerOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;  ///< small, so the first all-reduce starts early
};

/// Averages the gradients of `parameters` over all ranks, in buckets.
class GradientReducer {
 public:
  GradientReducer(std::vector<torch::Tensor> parameters, const Communicator& comm, const ReducerOptions& options);

  /// All-reduces every gradient and divides by the world size; call once backward of the last
  /// micro-step is done. Parameters without a gradient contribute zeros. `control` rides along in
  /// the last bucket and comes back summed over ranks (the trainer's stop vote: no extra collective).
  double synchronize(double control = 0);

  /// Parameter indices of each bucket, in launch order.
  std::vector<std::vector<std::size_t>> bucket_layout() const;

 private:
  struct Bucket {
    std::vector<std::size_t> parameters;
    int64_t numel = 0;
  };

  std::vector<torch::Tensor> parameters_;
  const Communicator& comm_;
  std::vector<Bucket> buckets_;
};

}  // namespace ddp
