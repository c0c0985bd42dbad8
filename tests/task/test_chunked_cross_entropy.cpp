// The chunked head-and-loss (Note [Chunked cross-entropy]) against the head's linear and
// torch's cross-entropy: the same losses and gradients, at any chunk size, with label smoothing.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <ATen/autocast_mode.h>

#include "ddp/task/chunked_cross_entropy.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace F = torch::nn::functional;

namespace {

double largest(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("the chunked cross-entropy equals the head's logits under torch's cross-entropy within 1e-6, loss and "
          "gradients, at any chunk size, with and without label smoothing and a bias",
          "[task][loss]") {
  torch::manual_seed(3);
  const int64_t n = 37, c = 16, v = 101;
  const torch::Tensor targets = torch::randint(v, {n}, torch::kLong);
  const torch::Tensor upstream = torch::rand({n});  // each token's incoming gradient, as a mean's would be, but uneven
  for (bool with_bias : {false, true}) {
    for (double smoothing : {0.0, 0.1}) {
      for (int64_t chunk : {1, 8, 36, 37, 64}) {
        INFO("bias " << with_bias << ", smoothing " << smoothing << ", chunk " << chunk);
        torch::Tensor h = torch::randn({n, c}).requires_grad_(), w = (torch::randn({v, c}) * 0.3).requires_grad_();
        torch::Tensor b = with_bias ? torch::randn({v}).requires_grad_() : torch::Tensor();
        const std::vector<torch::Tensor> inputs = with_bias ? std::vector<torch::Tensor>{h, w, b}
                                                            : std::vector<torch::Tensor>{h, w};
        torch::Tensor plain = F::cross_entropy(F::linear(h, w, b), targets,
                                               F::CrossEntropyFuncOptions().reduction(torch::kNone).label_smoothing(smoothing));
        auto plain_grads = torch::autograd::grad({(plain * upstream).sum()}, inputs);
        torch::Tensor chunked = ddp::chunked_cross_entropy(h, w, b, targets, smoothing, chunk);
        REQUIRE(chunked.sizes() == plain.sizes());
        CHECK(largest(chunked, plain) < 1e-6);
        auto chunked_grads = torch::autograd::grad({(chunked * upstream).sum()}, inputs);
        for (std::size_t i = 0; i < plain_grads.size(); ++i) {
          INFO("gradient " << i);
          CHECK(largest(chunked_grads[i], plain_grads[i]) < 1e-6);
        }
      }
    }
  }
}

TEST_CASE("under bf16 autocast the chunked cross-entropy's backward recomputes the forward's bfloat16 logits, and "
          "both stay near the plain loss's",
          "[task][loss][precision]") {
  torch::manual_seed(5);
  const int64_t n = 24, c = 16, v = 50;
  const torch::Tensor targets = torch::randint(v, {n}, torch::kLong);
  torch::Tensor h = torch::randn({n, c}).requires_grad_(), w = (torch::randn({v, c}) * 0.3).requires_grad_();
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(true);
  torch::Tensor plain = F::cross_entropy(F::linear(h, w), targets, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  torch::Tensor chunked = ddp::chunked_cross_entropy(h, w, torch::Tensor(), targets, 0.0, 7);
  at::autocast::set_cpu_enabled(false);
  at::autocast::clear_cache();
  CHECK(chunked.scalar_type() == torch::kFloat);
  CHECK(largest(chunked, plain) < 2e-2);
  auto plain_grads = torch::autograd::grad({plain.sum()}, {h, w});
  auto chunked_grads = torch::autograd::grad({chunked.sum()}, {h, w});
  for (std::size_t i = 0; i < 2; ++i) {
    INFO("gradient " << i);
    CHECK(chunked_grads[i].scalar_type() == torch::kFloat);
    CHECK(largest(chunked_grads[i], plain_grads[i]) < 2e-2 * plain_grads[i].abs().max().item<double>());
  }
  // Exactly the forward's logits: the loss's gradient at the target is softmax - 1 of the bf16 product.
  torch::Tensor logits = F::linear(h.detach().to(torch::kBFloat16), w.detach().to(torch::kBFloat16)).to(torch::kFloat);
  torch::Tensor expected = torch::softmax(logits, 1).mm(w.detach().to(torch::kBFloat16).to(torch::kFloat));
  expected -= w.detach().to(torch::kBFloat16).to(torch::kFloat).index_select(0, targets);
  CHECK(largest(chunked_grads[0], expected) < 2e-2);
}

TEST_CASE("a loss chunk's logits stay about 32 MiB", "[task][loss]") {
  CHECK(ddp::loss_chunk_tokens(50304) == 166);
  CHECK(ddp::loss_chunk_tokens(256) == 32768);
  CHECK(ddp::loss_chunk_tokens(1 << 30) == 1);
}

}  // namespace DDP_TEST_FILE
