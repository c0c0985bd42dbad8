#include "ddp/model/byte_mask_dropout.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <cmath>
#include <mutex>

#include "ddp/common/splitmix64.h"
#include "ddp/model/rank_random.h"

namespace ddp {
namespace {

// Note [Byte-mask dropout]
// LibTorch's CPU dropout draws a float per element from its Mersenne Twister and keeps a float
// mask for backward. On a GraphSAGE batch of Reddit's size ([26k, 256] after the first layer) that
// was 15% of a step and 27 MB of every rank's memory. Here one 64-bit draw from the (rank's) CPU generator
// seeds SplitMix64, whose each output gives four 16-bit lanes compared against p · 65536, and the
// mask is one byte per element. The same distribution up to p's rounding to 1/65536; not the same
// masks as torch's, which nothing needs.

uint64_t draw_seed() {
  at::Generator generator = cpu_generator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

// out[i] = mask[i] ? in[i] * scale : 0, for float32 contiguous tensors.
torch::Tensor apply_mask(const torch::Tensor& in, const torch::Tensor& mask, float scale) {
  auto out = torch::empty_like(in);
  const float* x = in.data_ptr<float>();
  const uint8_t* keep = mask.data_ptr<uint8_t>();
  float* y = out.data_ptr<float>();
  for (int64_t i = 0, n = in.numel(); i < n; ++i) y[i] = keep[i] ? x[i] * scale : 0.0f;
  return out;
}

class ByteMaskDropout : public torch::autograd::Function<ByteMaskDropout> {
 public:
  /// With `relu`, an element is kept only where it is also positive: ReLU's mask folded into dropout's.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double p, bool relu) {
    auto input = x.contiguous();
    auto mask = torch::empty(input.sizes(), torch::kUInt8);
    uint8_t* keep = mask.data_ptr<uint8_t>();
    const auto threshold = static_cast<uint64_t>(std::llround(p * 65536.0));
    uint64_t state = draw_seed();
    const int64_t n = input.numel();
    for (int64_t i = 0; i < n; i += 4) {
      uint64_t bits = splitmix64(state);
      for (int64_t j = i; j < std::min(n, i + 4); ++j, bits >>= 16) keep[j] = (bits & 0xffff) >= threshold;
    }
    if (relu) {
      const float* values = input.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) keep[i] &= values[i] > 0;
    }
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    ctx->save_for_backward({mask});
    ctx->saved_data["scale"] = static_cast<double>(scale);
    return apply_mask(input, mask, scale);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto mask = ctx->get_saved_variables()[0];
    auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    return {apply_mask(grads[0].contiguous(), mask, scale), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor byte_mask_dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p == 0) return x;
  if (p >= 1) return x * 0.0;  // still a function of x, with a zero gradient
  if (x.scalar_type() != torch::kFloat || !x.device().is_cpu())  // the fast path is for CPU float32
    return rank_dropout(x, p, training);
  return ByteMaskDropout::apply(x, p, false);
}

torch::Tensor relu_dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p == 0 || p >= 1 || x.scalar_type() != torch::kFloat || !x.device().is_cpu())
    return byte_mask_dropout(torch::relu(x), p, training);
  return ByteMaskDropout::apply(x, p, true);
}

}  // namespace ddp
