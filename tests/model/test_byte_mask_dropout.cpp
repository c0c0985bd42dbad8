// Byte-mask dropout: torch's dropout in distribution, its gradient, and its masks replayed from the
// global generator's state (what a checkpoint restores).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ddp/model/byte_mask_dropout.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using ddp::byte_mask_dropout;

TEST_CASE("byte-mask dropout zeroes a fraction p, scales the rest, and back-propagates through the same mask", "[model]") {
  for (double p : {0.1, 0.5, 0.8}) {
    INFO("p = " << p);
    torch::manual_seed(3);
    auto x = (torch::rand({400, 500}) + 0.5).requires_grad_(true);
    auto y = byte_mask_dropout(x, p, /*training=*/true);
    auto kept = y.ne(0);
    double fraction = kept.to(torch::kDouble).mean().item<double>();
    CHECK(fraction == Approx(1 - p).margin(0.005));  // 200,000 draws: the margin is over 5 sigma
    CHECK(torch::allclose(y.masked_select(kept), x.masked_select(kept) / (1 - p)));
    y.sum().backward();
    CHECK(torch::allclose(x.grad(), kept.to(torch::kFloat) / (1 - p)));
    // Neighbouring elements are independent: the kept fraction among the kept's right-hand neighbours is 1 - p too.
    auto flat = kept.view(-1);
    auto right = flat.slice(0, 1).masked_select(flat.slice(0, 0, -1));
    CHECK(right.to(torch::kDouble).mean().item<double>() == Approx(1 - p).margin(0.01));
  }
  auto x = torch::randn({1000});
  CHECK(torch::equal(byte_mask_dropout(x, 0.5, /*training=*/false), x));
  CHECK(torch::equal(byte_mask_dropout(x, 0.0, /*training=*/true), x));
  auto state = at::detail::getDefaultCPUGenerator().get_state();
  auto first = byte_mask_dropout(x, 0.5, true), second = byte_mask_dropout(x, 0.5, true);
  CHECK_FALSE(torch::equal(first, second));  // a new mask each call ...
  at::Generator global = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  global.set_state(state);
  CHECK(torch::equal(byte_mask_dropout(x, 0.5, true), first));  // ... and the same one from the same state
}

TEST_CASE("relu_dropout is byte-mask dropout of relu(x): the same values, gradient and draws", "[model]") {
  at::Generator global = at::detail::getDefaultCPUGenerator();
  auto x = torch::randn({300, 70}).requires_grad_(true);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto state = global.get_state();
  auto fused = ddp::relu_dropout(x, 0.3, /*training=*/true);
  global.set_state(state);
  auto reference = byte_mask_dropout(torch::relu(x_ref), 0.3, /*training=*/true);
  CHECK(torch::equal(fused, reference));
  auto weights = torch::randn({300, 70});
  (fused * weights).sum().backward();
  (reference * weights).sum().backward();
  CHECK(torch::equal(x.grad(), x_ref.grad()));
  CHECK(torch::equal(ddp::relu_dropout(x, 0.3, /*training=*/false), torch::relu(x)));
}

}  // namespace DDP_TEST_FILE
