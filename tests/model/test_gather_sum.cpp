// gather_sum gives index_select + index_add_'s sums and gradient bit for bit, without the messages.
#include <torch/torch.h>
#undef CHECK  // glog's CHECK (via LibTorch) must not shadow Catch's
#include <catch2/catch.hpp>

#include "ddp/model/gather_sum.h"

TEST_CASE("gather_sum equals index_select then index_add_, forward and backward, bit for bit", "[model]") {
  torch::manual_seed(9);
  auto src = torch::randint(0, 50, {700}, torch::kInt64), dst = torch::randint(0, 20, {700}, torch::kInt64);
  auto x = torch::randn({50, 33}).requires_grad_(true);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto ours = ddp::gather_sum(x, src, dst, 25);  // destinations 20..24 have no edges: zeros
  auto reference = torch::zeros({25, 33}).index_add(0, dst, x_ref.index_select(0, src));
  CHECK(torch::equal(ours, reference));
  auto weights = torch::randn({25, 33});
  (ours * weights).sum().backward();
  (reference * weights).sum().backward();
  CHECK(torch::equal(x.grad(), x_ref.grad()));
}
