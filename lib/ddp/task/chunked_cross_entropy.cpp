#include "ddp/task/chunked_cross_entropy.h"

#include <torch/autograd.h>
#include <torch/nn/functional/linear.h>

#include <algorithm>

namespace ddp {

// Note [Chunked cross-entropy]
// For a 50k vocabulary the logits [B·T, V] in float32 are the largest tensor of a GPT's step, held
// twice over (the logits and log-softmax's output, kept for backward). As Liger's fused linear
// cross-entropy and llm.c do, the head's product and the loss run a chunk of tokens at a time: a
// chunk's logits give its losses (log-sum-exp minus the target's logit; with label smoothing ε,
// (1-ε)·that + ε·(log-sum-exp minus the mean logit)) and are dropped. Backward makes each chunk's
// logits again and turns them into the gradient at once: softmax, minus (1-ε) at the target and
// ε/V everywhere, times the token's incoming gradient; then into the hidden states' and the
// weight's gradients. One more matrix product of the head than the plain loss, and no [B·T, V]
// tensor alive beyond one chunk.

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A chunk's logits in float32, the product in `w`'s dtype (the weight and bias cast once per pass).
torch::Tensor chunk_logits(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& b) {
  return torch::nn::functional::linear(h.to(w.scalar_type()), w, b).to(torch::kFloat);
}

// `bias` as chunk_logits takes it: [V] in `dtype`, or undefined for the [0] that stands for none
// (an autograd function's inputs must all be tensors).
torch::Tensor bias_in(const torch::Tensor& bias, torch::ScalarType dtype) {
  return bias.numel() > 0 ? bias.to(dtype) : torch::Tensor();
}

class ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& targets, double smoothing,
                               int64_t chunk) {
    const int64_t n = hidden.size(0);
    // The dtype the head's product runs in: under autocast, what it gives (bfloat16), which backward,
    // outside autocast, must use too so that its logits are the forward's.
    const torch::ScalarType compute =
        torch::nn::functional::linear(hidden.narrow(0, 0, std::min<int64_t>(n, 1)), weight.narrow(0, 0, 1)).scalar_type();
    const torch::Tensor w = weight.to(compute), b = bias_in(bias, compute);
    torch::Tensor losses = torch::empty({n}, hidden.options().dtype(torch::kFloat));
    for (int64_t first = 0; first < n; first += chunk) {
      const int64_t size = std::min(chunk, n - first);
      torch::Tensor logits = chunk_logits(hidden.narrow(0, first, size), w, b);
      torch::Tensor lse = logits.logsumexp(1);
      torch::Tensor loss = lse - logits.gather(1, targets.narrow(0, first, size).unsqueeze(1)).squeeze(1);
      if (smoothing > 0) loss = (1 - smoothing) * loss + smoothing * (lse - logits.mean(1));
      losses.narrow(0, first, size).copy_(loss);
    }
    ctx->save_for_backward({hidden, weight, bias, targets});
    ctx->saved_data["smoothing"] = smoothing;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["compute"] = static_cast<int64_t>(compute);
    return losses;
  }

  static variable_list backward(AutogradContext* ctx, variable_list outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &bias = saved[2], &targets = saved[3];
    const double smoothing = ctx->saved_data["smoothing"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt(), n = hidden.size(0), vocabulary = weight.size(0);
    const torch::Tensor incoming = outputs[0].to(torch::kFloat);
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    torch::Tensor grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    const bool biased = bias.numel() > 0;
    torch::Tensor grad_bias = biased ? torch::zeros({vocabulary}, weight.options().dtype(torch::kFloat)) : torch::Tensor();
    const auto compute = static_cast<torch::ScalarType>(ctx->saved_data["compute"].toInt());
    const torch::Tensor w = weight.to(compute), b = bias_in(bias, compute);
    for (int64_t first = 0; first < n; first += chunk) {
      const int64_t size = std::min(chunk, n - first);
      const torch::Tensor h = hidden.narrow(0, first, size);
      torch::Tensor dlogits = chunk_logits(h, w, b).softmax(1);
      dlogits.scatter_add_(1, targets.narrow(0, first, size).unsqueeze(1),
                           torch::full({size, 1}, -(1 - smoothing), dlogits.options()));
      if (smoothing > 0) dlogits.sub_(smoothing / static_cast<double>(vocabulary));
      dlogits.mul_(incoming.narrow(0, first, size).unsqueeze(1));
      grad_weight.addmm_(dlogits.t(), h.to(torch::kFloat));
      if (grad_bias.defined()) grad_bias.add_(dlogits.sum(0));
      grad_hidden.narrow(0, first, size).copy_(dlogits.to(compute).mm(w));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()),
            biased ? grad_bias.to(bias.scalar_type()) : torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor chunked_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias,
                                    const torch::Tensor& targets, double label_smoothing, int64_t chunk_tokens) {
  const torch::Tensor biases = bias.defined() ? bias : torch::empty({0}, weight.options());
  return ChunkedCrossEntropy::apply(hidden, weight, biases, targets, label_smoothing, std::max<int64_t>(1, chunk_tokens));
}

int64_t loss_chunk_tokens(int64_t vocabulary) {
  constexpr int64_t kChunkElements = int64_t{8} << 20;  // 32 MiB of float32 logits
  return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, vocabulary));
}

}  // namespace ddp
