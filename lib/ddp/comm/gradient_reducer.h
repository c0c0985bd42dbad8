#pragma once
// Gradient sync: flashlight's Reducer idea (prepare / finish) over c10d, with DDP's bucketing and
// its overlap of communication with backward.

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "ddp/comm/dist_config.h"
#include "ddp/comm/process_group.h"

namespace torch::autograd {
struct Node;
}

namespace ddp {

/// Time spent in gradient all-reduce in one step.
struct ReducerTiming {
  double total_ms = 0;    ///< from the first bucket's launch to the last one's completion
  double exposed_ms = 0;  ///< of that, after backward ended: what the step waited for
};

/// Averages the gradients of `parameters` over all ranks, in buckets. The gradients are views of
/// the buckets (Note [Gradients as bucket views]).
class GradientReducer {
 public:
  /// Buckets `parameters` (see Note [Bucket order]; dist.bucket_cap_mb, dist.first_bucket_mb),
  /// points each one's gradient into its bucket, and, with dist.overlap, hooks their gradient
  /// accumulators. The last bucket has room for `side_values` numbers (see prepare()).
  GradientReducer(std::vector<torch::Tensor> parameters, const Communicator& comm, const DistConfig& config,
                  int side_values = 0);
  ~GradientReducer();
  // The autograd hooks capture `this`.
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Call before the backward of the last micro-step of an optimizer step: its gradients are the
  /// ones to reduce. `side_values` (as many as the constructor made room for) travel in the last
  /// bucket and come back from finish() summed over ranks: a caller agrees on a few numbers each
  /// step without a collective of its own. They pass through the bucket's dtype (float32: exact
  /// for integers up to 2^24).
  void prepare(const std::vector<double>& side_values = {});

  /// Call after that backward: launches what backward has not, waits for everything and returns
  /// the side values summed over ranks; the gradients then hold the averages. Parameters that got
  /// no gradient contribute zeros.
  std::vector<double> finish();

  /// Zeroes the gradients in place, keeping them views of the buckets: use it instead of the
  /// optimizer's zero_grad, which may detach or drop them.
  void zero_grad();

  /// The last step's communication time.
  const ReducerTiming& timing() const { return timing_; }

  /// Parameter indices of each bucket, in launch order.
  std::vector<std::vector<std::size_t>> bucket_layout() const;

 private:
  struct Bucket {
    std::vector<std::size_t> parameters;
    int64_t numel = 0;
    std::size_t pending = 0;  // gradients not yet ready this step
    std::vector<torch::Tensor> flat;  // one tensor: the bucket's gradients, then (last bucket) the side values
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
  DistConfig config_;
  int side_count_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // parameter → bucket
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // kept alive: they hold our hooks
  bool armed_ = false;  // between prepare() and finish()
  std::size_t next_launch_ = 0;
  std::vector<double> side_values_;
  Clock::time_point first_launch_;
  ReducerTiming timing_;
};

}  // namespace ddp
