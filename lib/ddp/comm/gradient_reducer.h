#pragma once
// Gradient sync: flashlight's Reducer idea (prepare / finish) over c10d, with DDP's bucketing and
// its overlap of communication with backward.

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "ddp/comm/dist_config.h"
#include "ddp/comm/gradient_sync.h"
#include "ddp/comm/process_group.h"
#include "ddp/common/value_slots.h"

namespace torch::autograd {
struct Node;
}

namespace ddp {

/// Averages the gradients of `parameters` over all ranks of `comm`, in buckets: replicated data
/// parallelism. The gradients are views of the buckets (Note [Gradients as bucket views]).
class GradientReducer final : public GradientSync {
 public:
  /// Buckets `parameters` (see Note [Bucket order]; dist.bucket_cap_mb, dist.first_bucket_mb),
  /// points each one's gradient into its bucket, and, with dist.overlap, hooks their gradient
  /// accumulators. The last bucket has room for `side_values` (see prepare()), which must outlive it.
  GradientReducer(std::vector<torch::Tensor> parameters, const Communicator& comm, const DistConfig& config,
                  ValueSlots* side_values = nullptr);
  ~GradientReducer() override;
  // The autograd hooks capture `this`.
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before the backward of the last micro-step: its gradients are the ones to reduce. The side
  /// values, as they are now, travel in the last bucket and finish() leaves their sums over ranks
  /// in their place: participants agree on a few numbers each step without a collective of their
  /// own. They pass through the bucket's dtype (float32: exact for integers up to 2^24).
  void prepare() override;

  /// After that backward: launches what backward has not and waits for everything; the gradients
  /// then hold the averages, the side values the sums. A parameter that got no gradient on some
  /// ranks contributes zeros there; one that got none on any rank is left without a gradient until
  /// zero_grad(), so the optimizer skips it (Note [Unused parameters]).
  void finish() override;

  /// Zeroes the gradients in place, keeping them views of the buckets: use it instead of the
  /// optimizer's zero_grad, which may detach or drop them.
  void zero_grad() override;

  const ReducerTiming& timing() const override { return timing_; }

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
  ValueSlots* side_values_;
  int64_t side_count_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // parameter → bucket
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // kept alive: they hold our hooks
  bool armed_ = false;  // between prepare() and finish()
  std::vector<uint8_t> used_;  // parameter → got a gradient on this rank since zero_grad()
  std::size_t next_launch_ = 0;
  Clock::time_point first_launch_;
  ReducerTiming timing_;
};

}  // namespace ddp
