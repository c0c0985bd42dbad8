// train.precision: bf16 — the autocast scope, and GraphSAGE's own arithmetic under it.
#include <torch/torch.h>
#undef CHECK  // glog's CHECK (via LibTorch) must not shadow Catch's
#include <catch2/catch.hpp>

#include "ddp/loop/autocast_scope.h"
#include "ddp/model/graphsage.h"

using namespace ddp;

TEST_CASE("the autocast scope runs products in bfloat16 inside, float32 outside, and nests", "[precision]") {
  auto a = torch::randn({8, 16}), b = torch::randn({16, 4});
  CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
  {
    AutocastScope off(torch::kCPU, false);
    CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
  }
  {
    AutocastScope outer(torch::kCPU, true);
    CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
    {
      AutocastScope inner(torch::kCPU, true);
      CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
    }
    CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);  // the inner scope left the outer's on
  }
  CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
}

TEST_CASE("GraphSAGE under bf16 autocast: near its float32 output, float32 gradients", "[precision][graph]") {
  for (std::string aggregation : {"mean", "max", "sum"}) {
    INFO(aggregation);
    GraphSageOptions options;
    options.in = 12;
    options.out = 3;
    options.hidden = {8};
    options.aggregation = aggregation;
    torch::manual_seed(1);
    GraphSage model(options);
    auto x = torch::randn({40, 12});
    std::vector<BlockEdges> blocks{{torch::randint(0, 40, {120}), torch::randint(0, 20, {120}), 20},
                                   {torch::randint(0, 20, {50}), torch::randint(0, 5, {50}), 5}};
    torch::Tensor reference;
    {
      torch::NoGradGuard no_grad;
      reference = model->forward(x, blocks);
    }
    torch::Tensor mixed;
    {
      AutocastScope autocast(torch::kCPU, true);
      mixed = model->forward(x, blocks);  // both layers mix bfloat16 outputs with float32 weights
    }
    CHECK(mixed.scalar_type() == torch::kBFloat16);
    CHECK(torch::allclose(mixed.to(torch::kFloat), reference, /*rtol=*/0.05, /*atol=*/0.05));
    mixed.to(torch::kFloat).sum().backward();
    for (const auto& p : model->parameters()) {
      REQUIRE(p.grad().defined());
      CHECK(p.grad().scalar_type() == torch::kFloat);
    }
  }
}
