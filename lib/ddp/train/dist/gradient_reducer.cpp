#include "ddp/train/dist/gradient_reducer.h"

namespace ddp {

// Note [Bucket order]
// Buckets hold parameters in reverse registration order, because backward produces the last
// layer's gradients first; the first bucket is small so communication can start early. Every rank
// builds the same buckets from the same parameter list and launches them in the same order: c10d
// matches collectives by their sequence, so a different order on one rank would pair unrelated
// buffers (or hang). The parameter list is checked identical across ranks before training.

GradientReducer::GradientReducer(std::vector<torch::Tensor> parameters, c10::intrusive_ptr<CommBackend> group,
                                 const ReducerOptions& options)
    : parameters_(std::move(parameters)), group_(std::move(group)) {
  constexpr double kMiB = 1024.0 * 1024.0;
  Bucket current;
  int64_t current_bytes = 0;
  double cap = options.first_bucket_mb;
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    const auto& p = parameters_[i];
    current.parameters.push_back(i);
    current.numel += p.numel();
    current_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    if (current_bytes >= cap * kMiB) {
      buckets_.push_back(std::move(current));
      current = Bucket{};
      current_bytes = 0;
      cap = options.bucket_cap_mb;
    }
  }
  if (!current.parameters.empty()) buckets_.push_back(std::move(current));
}

void GradientReducer::synchronize() {
  const double world = static_cast<double>(group_->getSize());
  std::vector<std::vector<torch::Tensor>> flats(buckets_.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  // See Note [Bucket order]: launch all buckets in order, then wait in the same order.
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<torch::Tensor> pieces;
    for (std::size_t i : buckets_[b].parameters) {
      auto& p = parameters_[i];
      pieces.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros({p.numel()}, p.options()));
    }
    // Dividing while packing keeps the sum in range and costs no extra pass.
    flats[b] = {torch::cat(pieces).div_(world)};
    works.push_back(group_->allreduce(flats[b]));
  }
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    works[b]->wait();
    int64_t offset = 0;
    for (std::size_t i : buckets_[b].parameters) {
      auto& p = parameters_[i];
      auto averaged = flats[b][0].narrow(0, offset, p.numel()).view_as(p);
      if (p.grad().defined())
        p.mutable_grad().copy_(averaged);
      else
        p.mutable_grad() = averaged.clone();
      offset += p.numel();
    }
  }
}

std::vector<std::vector<std::size_t>> GradientReducer::bucket_layout() const {
  std::vector<std::vector<std::size_t>> layout;
  for (const auto& b : buckets_) layout.push_back(b.parameters);
  return layout;
}

}  // namespace ddp
