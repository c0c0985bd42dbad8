#pragma once
// Gradient sync: flashlight's Reducer idea (prepare / finish) over c10d, with DDP's bucketing and
// its overlap of communication with backward.

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "ddp/train/dist/process_group.h"

namespace torch::autograd {
struct Node;
}

namespace ddp {

/// Bucket sizes, in MiB, and whether buckets start during backward.
struct ReducerOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;  ///< small, so the first all-reduce starts early
  bool overlap = true;         ///< launch each bucket as soon as its gradients are ready
};

/// Time spent in gradient all-reduce in one step.
struct ReducerTiming {
  double total_ms = 0;    ///< from the first bucket's launch to the last one's completion
  double exposed_ms = 0;  ///< of that, after backward ended: what the step waited for
};

/// Averages the gradients of `parameters` over all ranks, in buckets. The gradients are views of
/// the buckets (Note [Gradients as bucket views]).
class GradientReducer {
 public:
  /// Buckets `parameters` (see Note [Bucket order]), points each one's gradient into its bucket,
  /// and, with overlap, hooks their gradient accumulators.
  GradientReducer(std::vector<torch::Tensor> parameters, const Communicator& comm, const ReducerOptions& options);
  ~GradientReducer();
  // The autograd hooks capture `this`.
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Call before the backward of the last micro-step of an optimizer step: its gradients are the
  /// ones to reduce. `control` rides along in the last bucket and comes back summed over ranks
  /// (the trainer's stop vote: no extra collective).
  void prepare(double control);

  /// Call after that backward: launches what backward has not, waits for everything and returns
  /// the summed control value; the gradients then hold the averages. Parameters that got no
  /// gradient contribute zeros.
  double finish();

  /// Zeroes the gradients in place, keeping them views of the buckets: use it instead of the
  /// optimizer's zero_grad, which may detach or drop them.
  void zero_grad();

  /// prepare(control) + finish(), for callers that do not overlap.
  double synchronize(double control = 0) {
    prepare(control);
    return finish();
  }

  /// The last step's communication time.
  const ReducerTiming& timing() const { return timing_; }

  /// Parameter indices of each bucket, in launch order.
  std::vector<std::vector<std::size_t>> bucket_layout() const;

 private:
  struct Bucket {
    std::vector<std::size_t> parameters;
    int64_t numel = 0;
    std::size_t pending = 0;  // gradients not yet ready this step
    std::vector<torch::Tensor> flat;  // one tensor: the bucket's gradients, then (last bucket) the control word
    c10::intrusive_ptr<c10d::Work> work;
    int64_t seq = 0;
  };
  using Clock = std::chrono::steady_clock;

  void on_gradient_ready(std::size_t parameter);
  void launch_ready_buckets(bool all);
  void launch(Bucket& bucket, bool last);
  void point_gradients_at_buckets();  // re-points gradients that were replaced or dropped

  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> gradient_views_;  // parameter → its gradient's place in its bucket
  const Communicator& comm_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // parameter → bucket
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // kept alive: they hold our hooks
  bool armed_ = false;  // between prepare() and finish()
  std::size_t next_launch_ = 0;
  double control_ = 0;
  Clock::time_point first_launch_;
  ReducerTiming timing_;
};

}  // namespace ddp
