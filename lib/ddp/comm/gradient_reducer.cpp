#include "ddp/comm/gradient_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "ddp/comm/shm_allreduce.h"

namespace ddp {

// Note [Unused parameters]
// PyTorch's optimizers skip a parameter whose .grad is None: no weight decay, no momentum, no Adam
// step. Here every gradient is a bucket view, always defined, so a parameter that forward never
// used would be stepped with a zero gradient (weight decay shrinking it, momentum moving it). The
// reducer therefore notes which parameters got a gradient during the step (any micro-step), sums
// those flags over the ranks in the last bucket (after the side values), and leaves the gradient
// of every parameter no rank used undefined until zero_grad(), so the optimizer skips it as
// Python's does. A parameter used on some ranks only is averaged with zeros from the others:
// DDP's find_unused_parameters=True. At the last bucket's launch every flag is final: that bucket
// launches only after all the others, each of which waited for all its gradients, or in finish(),
// after backward.

// Note [Bucket order]
// Buckets hold parameters in reverse registration order, because backward produces the last
// layer's gradients first; the first bucket is small so communication can start early. Every rank
// builds the same buckets from the same parameter list and launches them strictly in bucket order
// (a bucket that is ready early waits for the ones before it): c10d matches collectives by their
// sequence, so a different order on one rank would pair unrelated buffers or hang. The parameter
// list is checked identical across ranks before training.

// Note [Gradients as bucket views]
// Each parameter's .grad is a view into its bucket's flat tensor (DDP's gradient_as_bucket_view),
// with the parameter's own strides, so backward accumulates straight into the bucket and the
// all-reduce runs in place: no copy into a bucket before it and none back after it. This holds as
// long as nothing replaces the gradients; zero_grad() zeroes them in place, and re-points any
// that were replaced anyway.

GradientReducer::GradientReducer(std::vector<torch::Tensor> parameters, const Communicator& comm,
                                 const DistConfig& config, ValueSlots* side_values)
    : parameters_(std::move(parameters)), comm_(comm), config_(config), side_values_(side_values),
      side_count_(side_values ? static_cast<int64_t>(side_values->size()) : 0),
      bucket_of_(parameters_.size()) {
  constexpr double kMiB = 1024.0 * 1024.0;
  Bucket current;
  int64_t current_bytes = 0;
  double cap = config.first_bucket_mb;
  auto close_bucket = [&] {
    buckets_.push_back(std::move(current));
    current = Bucket{};
    current_bytes = 0;
  };
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    const auto& p = parameters_[i];
    if (!current.parameters.empty()) {  // a bucket is one tensor: one dtype on one device
      const auto& previous = parameters_[current.parameters.back()];
      if (previous.scalar_type() != p.scalar_type() || previous.device() != p.device()) close_bucket();
    }
    bucket_of_[i] = buckets_.size();
    current.parameters.push_back(i);
    current.numel += p.numel();
    current_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    if (current_bytes >= cap * kMiB) {
      close_bucket();
      cap = config.bucket_cap_mb;
    }
  }
  if (!current.parameters.empty()) buckets_.push_back(std::move(current));

  gradient_views_.resize(parameters_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const auto& first = parameters_[bucket.parameters.front()];
    const int64_t side_words = b + 1 == buckets_.size() ? side_count_ + static_cast<int64_t>(parameters_.size()) : 0;
    bucket.flat = {torch::zeros({bucket.numel + side_words}, first.options().requires_grad(false))};
    int64_t offset = 0;
    for (std::size_t i : bucket.parameters) {
      const auto& p = parameters_[i];
      auto slice = bucket.flat[0].narrow(0, offset, p.numel());
      // Channels-last weights get channels-last gradients: the layout autograd produces for them.
      gradient_views_[i] = p.is_non_overlapping_and_dense() ? slice.as_strided(p.sizes(), p.strides()) : slice.view(p.sizes());
      offset += p.numel();
    }
  }
  used_.assign(parameters_.size(), 0);
  zero_grad();

  // Fires after a gradient has been accumulated into param.grad (DDP's autograd_hook): it notes the
  // use (Note [Unused parameters]) and, with dist.overlap, launches the buckets that are ready.
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
    if (!accumulator) continue;  // needs no gradient: never used, never stepped
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(i);
          return outputs;
        }));
    grad_accumulators_.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::prepare() {
  TORCH_CHECK(!side_values_ || static_cast<int64_t>(side_values_->size()) == side_count_,
              "GradientReducer: side values were reserved after it was built");
  armed_ = true;
  next_launch_ = 0;
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.parameters.size();
    bucket.work.reset();
  }
}

void GradientReducer::on_gradient_ready(std::size_t parameter) {
  used_[parameter] = 1;
  if (!armed_ || !config_.overlap) return;  // an accumulation micro-step: gradients only accumulate locally
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  if (bucket.pending > 0 && --bucket.pending == 0) launch_ready_buckets(false);
}

void GradientReducer::launch_ready_buckets(bool all) {
  // See Note [Bucket order].
  while (next_launch_ < buckets_.size() && (all || buckets_[next_launch_].pending == 0)) {
    launch(buckets_[next_launch_], next_launch_ + 1 == buckets_.size());
    ++next_launch_;
  }
}

void GradientReducer::zero_grad() {
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) bucket.flat[0].zero_();
  point_gradients_at_buckets();
  std::fill(used_.begin(), used_.end(), 0);
}

void GradientReducer::point_gradients_at_buckets() {
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (!parameters_[i].grad().is_same(gradient_views_[i])) parameters_[i].mutable_grad() = gradient_views_[i];
}

void GradientReducer::launch(Bucket& bucket, bool last) {
  if (next_launch_ == 0) first_launch_ = Clock::now();
  const double world = static_cast<double>(comm_.world_size);
  torch::NoGradGuard no_grad;
  for (std::size_t i : bucket.parameters) {
    auto& p = parameters_[i];
    if (!p.grad().defined())
      gradient_views_[i].zero_();  // dropped (see the Note): contributes zeros
    else if (!p.grad().is_same(gradient_views_[i]))
      gradient_views_[i].copy_(p.grad());  // replaced (see the Note)
  }
  auto& flat = bucket.flat[0];
  if (last && comm_.world_size > 1) {  // one rank's sums are its own: finish() keeps them on the host
    // Multiplied by the world size, because the bucket is averaged, not summed.
    const auto count = static_cast<int64_t>(parameters_.size());
    if (side_count_ > 0) {
      auto side = torch::tensor(side_values_->packed(), torch::kDouble).mul_(world);
      flat.narrow(0, flat.size(0) - count - side_count_, side_count_).copy_(side);
    }
    auto used = torch::from_blob(used_.data(), {count}, torch::kUInt8).to(torch::kDouble).mul_(world);
    flat.narrow(0, flat.size(0) - count, count).copy_(used);
  }
  if (comm_.world_size == 1) return;  // nothing to sum with: bucket.work stays empty
  // Each rank's share is divided before summing, like DDP: it keeps the sum in range. The
  // shared-memory path divides as it sums, saving a pass over the bucket.
  bucket.seq = comm_.tracker->begin("gradient all_reduce");
  if (comm_.shared_memory && SharedMemoryAllReduce::supports(flat)) {
    bucket.work = comm_.shared_memory->sum_async(flat, static_cast<float>(world));
  } else {
    flat.div_(world);
    bucket.work = comm_.group->allreduce(bucket.flat);
  }
}

void GradientReducer::finish() {
  if (buckets_.empty()) return;  // nothing carried the side values: they stay this rank's
  auto backward_done = Clock::now();
  launch_ready_buckets(/*all=*/true);  // unused parameters, or overlap off
  armed_ = false;
  for (auto& bucket : buckets_)
    if (bucket.work) comm_.tracker->wait(bucket.work, bucket.seq);
  point_gradients_at_buckets();  // any that were replaced or dropped (their values were copied in)
  auto done = Clock::now();
  timing_.total_ms = std::chrono::duration<double, std::milli>(done - first_launch_).count();
  timing_.exposed_ms = std::chrono::duration<double, std::milli>(done - std::max(backward_done, first_launch_)).count();
  const auto count = static_cast<int64_t>(parameters_.size());
  if (comm_.world_size == 1) {
    // The side values stay this rank's, and its use flags are the sums: reading them back from a GPU
    // would wait there for the whole backward every step.
    for (int64_t i = 0; i < count; ++i)
      if (!used_[static_cast<std::size_t>(i)]) parameters_[static_cast<std::size_t>(i)].mutable_grad().reset();
    return;
  }
  const auto& last = buckets_.back().flat[0];
  auto sums = last.narrow(0, last.size(0) - count - side_count_, side_count_ + count).to(torch::kCPU, torch::kDouble).contiguous();
  const double* sum = sums.data_ptr<double>();
  if (side_count_ > 0) std::copy(sum, sum + side_count_, side_values_->packed().begin());
  // Note [Unused parameters]: no rank used it, so the optimizer must not step it.
  for (int64_t i = 0; i < count; ++i)
    if (sum[side_count_ + i] < 0.5) parameters_[static_cast<std::size_t>(i)].mutable_grad().reset();
}

std::vector<std::vector<std::size_t>> GradientReducer::bucket_layout() const {
  std::vector<std::vector<std::size_t>> layout;
  for (const auto& b : buckets_) layout.push_back(b.parameters);
  return layout;
}

}  // namespace ddp
