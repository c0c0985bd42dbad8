#include "ddp/train/dist/gradient_reducer.h"

namespace ddp {

// Note [Bucket order]
// Buckets hold parameters in reverse registration order, because backward produces the last
// layer's gradients first; the first bucket is small so communication can start early. Every rank
// builds the same buckets from the same parameter list and launches them in the same order: c10d
// matches collectives by their sequence, so a different order on one rank would pair unrelated
// buffers (or hang). The parameter list is checked identical across ranks before training.

GradientReducer::GradientReducer(std::vector<torch::Tensor> parameters, const Communicator& comm,
                                 const ReducerOptions& options)
    : parameters_(std::move(parameters)), comm_(comm) {
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

double GradientReducer::synchronize(double control) {
  if (buckets_.empty()) return control;
  const double world = static_cast<double>(comm_.world_size);
  std::vector<std::vector<torch::Tensor>> flats(buckets_.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<int64_t> seqs;
  // See Note [Bucket order]: launch all buckets in order, then wait in the same order.
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<torch::Tensor> pieces;
    for (std::size_t i : buckets_[b].parameters) {
      auto& p = parameters_[i];
      pieces.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros({p.numel()}, p.options()));
    }
    bool last = b + 1 == buckets_.size();
    if (last) pieces.push_back(torch::full({1}, control * world, parameters_[0].options()));
    // Dividing while packing keeps the sum in range and costs no extra pass.
    flats[b] = {torch::cat(pieces).div_(world)};
    seqs.push_back(comm_.tracker->begin("gradient all_reduce"));
    works.push_back(comm_.group->allreduce(flats[b]));
  }
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    comm_.tracker->wait(works[b], seqs[b]);
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
  return flats.back()[0][-1].item<double>();
}

std::vector<std::vector<std::size_t>> GradientReducer::bucket_layout() const {
  std::vector<std::vector<std::size_t>> layout;
  for (const auto& b : buckets_) layout.push_back(b.parameters);
  return layout;
}

}  // namespace ddp
