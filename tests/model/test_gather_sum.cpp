// gather_sum gives index_select + index_add_'s sums and gradient bit for bit, without the messages.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ddp/model/gather_sum.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

TEST_CASE("gather_sum equals index_select then index_add_ and narrow, forward and backward, bit for bit", "[model]") {
  torch::manual_seed(9);
  auto src = torch::randint(0, 50, {700}, torch::kInt64), dst = torch::randint(0, 20, {700}, torch::kInt64);
  auto x = torch::randn({50, 33}).requires_grad_(true);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto [sums, self] = ddp::gather_sum(x, src, dst, 25);  // destinations 20..24 have no edges: zeros
  auto reference = torch::zeros({25, 33}).index_add(0, dst, x_ref.index_select(0, src));
  auto self_reference = x_ref.narrow(0, 0, 25);
  CHECK(torch::equal(sums, reference));
  CHECK(torch::equal(self, self_reference));
  auto weights = torch::randn({25, 33}), self_weights = torch::randn({25, 33});
  (sums * weights + self * self_weights).sum().backward();
  (reference * weights + self_reference * self_weights).sum().backward();
  CHECK(torch::allclose(x.grad(), x_ref.grad(), 0, 1e-6));  // one tensor's sum in place of autograd's two
}

}  // namespace DDP_TEST_FILE
