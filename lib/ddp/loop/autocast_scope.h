#pragma once
// Mixed precision (train.precision: bf16) as torch.autocast gives it: inside the scope, the ops
// autocast lists (matrix products, convolutions) run in bfloat16 on the model's device, and those
// that need range (losses, softmax, norms) in float32. Weights, gradients and the optimizer stay
// float32. bfloat16 has float32's exponent, so no loss scaling is needed; float16 would need it.

#include <torch/types.h>

namespace ddp {

/// Whether autocast is on for `device`'s type now, and to which dtype: what a recomputation
/// (activation checkpointing) must run under to repeat the forward.
bool autocast_enabled(torch::Device device);
torch::ScalarType autocast_dtype(torch::Device device);

/// train.tf32: whether CUDA's float32 matrix products (cuBLAS) and convolutions (cuDNN) may run in
/// TensorFloat-32, process-wide, as torch.backends.cuda.matmul.allow_tf32 and
/// torch.backends.cudnn.allow_tf32 set it. The CPU's kernels ignore it.
void use_tf32(bool on);

/// Autocast to `dtype` on `device`'s type for the scope's lifetime; nothing when `enabled` is false.
class AutocastScope {
 public:
  AutocastScope(torch::Device device, bool enabled, torch::ScalarType dtype = torch::kBFloat16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  torch::DeviceType type_;
  bool enabled_;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat;
};

}  // namespace ddp
