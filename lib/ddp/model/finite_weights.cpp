#include "ddp/model/finite_weights.h"

#include <torch/torch.h>

namespace ddp {

bool all_finite(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> finite;
  for (const auto& tensor : tensors)
    if (tensor.defined() && tensor.numel() > 0) finite.push_back(torch::isfinite(tensor.detach()).all().reshape({1}));
  if (finite.empty()) return true;
  // Tensors on several devices (one process driving several) each reduce where they live; the flags
  // then meet on one device, by copies that keep the host waiting for nothing.
  const auto device = finite.front().device();
  for (auto& flag : finite) flag = flag.to(device);
  return torch::cat(finite).all().item<bool>();
}

}  // namespace ddp
